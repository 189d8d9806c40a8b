// The approval pages. The queue follows /ws/approvals/, which says only that some request
// changed: the page then fetches its table again through the ordinary view (same filters),
// so what it shows is what the database and that view's checks say. The review page
// switches the diff view, opens the patch editor, accepts or rejects each hunk, and takes
// keyboard shortcuts.
(function () {
  "use strict";
  var RETRY_MIN_MS = 500;
  var RETRY_MAX_MS = 10000;
  var DEBOUNCE_MS = 150;
  var CLOSE_REASONS = {4401: "not logged in", 4403: "not allowed"};

  function socketUrl() {
    return (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws/approvals/";
  }

  // Calls onChange(event) for each change, and onChange(null) each time the socket opens:
  // what changed between the page's rendering (or the last socket) and now was not heard.
  // Reconnects with a doubling delay.
  function follow(onChange, setStatus) {
    var delay = RETRY_MIN_MS;
    function connect() {
      var socket = new WebSocket(socketUrl());
      socket.onopen = function () {
        delay = RETRY_MIN_MS;
        setStatus("live", "ok");
        onChange(null);
      };
      socket.onmessage = function (message) {
        var data = null;
        try { data = JSON.parse(message.data); } catch (ignored) { return; }
        onChange(data);
      };
      socket.onclose = function (e) {
        if (CLOSE_REASONS[e.code]) { setStatus(CLOSE_REASONS[e.code], "off"); return; }
        setStatus("reconnecting", "off");
        setTimeout(connect, delay);
        delay = Math.min(delay * 2, RETRY_MAX_MS);
      };
    }
    connect();
  }

  function statusSetter(id) {
    return function (text, cls) {
      var el = document.getElementById(id);
      if (!el) return;
      el.textContent = text;
      el.className = "live-status " + (cls || "");
    };
  }

  // --- the queue ---------------------------------------------------------------------------
  function queuePage(box) {
    var timer = null;
    var busy = false;
    var again = false;
    function fragmentUrl() {
      var url = new URL(location.href);
      url.searchParams.set("fragment", "1");
      return url.pathname + url.search;
    }
    function refresh() {
      if (busy) { again = true; return; }
      busy = true;
      var done = function () {
        busy = false;
        if (again) { again = false; schedule(); }
      };
      // htmx swaps the table and, out of band, the navigation's count.
      htmx.ajax("GET", fragmentUrl(), {target: box, swap: "innerHTML"}).then(done, done);
    }
    function schedule() {
      clearTimeout(timer);
      timer = setTimeout(refresh, DEBOUNCE_MS);
    }
    follow(schedule, statusSetter("approvals-live-status"));
  }

  // --- the review page ---------------------------------------------------------------------
  var VIEW_KEY = "harness.approvals.diffView";

  function reviewPage(root) {
    var inline = document.getElementById("diff-inline");
    var side = document.getElementById("diff-side");
    var form = document.getElementById("decision-form");
    var comment = document.getElementById("comment");
    var confirmInput = document.getElementById("confirm");
    var toggle = document.getElementById("edit-toggle");
    var editBox = document.getElementById("edit-patch");
    var patch = document.getElementById("edited_diff");
    var help = document.getElementById("shortcut-help");

    function showView(view) {
      if (!inline || !side) return;
      inline.hidden = view !== "inline";
      side.hidden = view !== "side";
      document.querySelectorAll(".view-switch button").forEach(function (b) {
        b.setAttribute("aria-pressed", String(b.dataset.view === view));
      });
      try { localStorage.setItem(VIEW_KEY, view); } catch (ignored) { /* private mode */ }
    }
    var saved = null;
    try { saved = localStorage.getItem(VIEW_KEY); } catch (ignored) { /* private mode */ }
    showView(saved === "side" ? "side" : "inline");
    document.querySelectorAll(".view-switch button").forEach(function (b) {
      b.addEventListener("click", function () { showView(b.dataset.view); });
    });

    var hunks = hunkChoice();

    function approveLabel() {
      var button = document.getElementById("approve");
      if (!button) return;
      var left = hunks.rejected();
      if (editing()) button.textContent = "Approve the edited patch";
      else if (left) button.textContent = "Approve without " + left + " hunk" + (left === 1 ? "" : "s");
      else button.textContent = "Approve";
    }
    function editing() { return Boolean(toggle && !editBox.hidden); }
    function setEditing(open) {
      if (!toggle) return;
      editBox.hidden = !open;
      patch.disabled = !open;  // a closed editor sends nothing: an ordinary approval
      toggle.setAttribute("aria-expanded", String(open));
      hunks.setAside(open);  // an edit says itself which hunks stay: never both at once
      approveLabel();
      if (open) patch.focus();
    }
    if (toggle) {
      toggle.addEventListener("click", function () { setEditing(editBox.hidden); });
    }

    function approve() {
      if (!form || !document.getElementById("approve")) return;  // nothing to approve
      if (!editing() && hunks.allRejected()) { hunks.sayAllRejected(); return; }
      if (confirmInput && confirmInput.value.trim() !== confirmInput.dataset.expected) {
        confirmInput.focus();  // a strong confirmation is typed, never skipped by a key
        return;
      }
      form.requestSubmit(document.getElementById("approve"));
    }
    function reject() {
      if (!form) return;
      if (!comment.value.trim()) { comment.focus(); return; }
      form.requestSubmit(document.getElementById("reject"));
    }
    if (form) {
      // A hint only: the server refuses a rejection without a reason anyway.
      form.addEventListener("submit", function (e) {
        var rejecting = e.submitter && e.submitter.value === "reject";
        if (rejecting && !comment.value.trim()) {
          e.preventDefault();
          document.getElementById("comment-hint").hidden = false;
          comment.focus();
        } else if (!rejecting && !editing() && hunks.allRejected()) {
          e.preventDefault();
          hunks.sayAllRejected();
        }
      });
    }
    if (editing()) hunks.setAside(true);  // the page came back with the editor open
    hunks.onChange(approveLabel);
    function go(url) { if (url) location.href = url; }

    document.addEventListener("keydown", function (e) {
      if (e.ctrlKey || e.metaKey || e.altKey || e.defaultPrevented) return;
      var target = e.target;
      if (target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName))) {
        if (e.key === "Escape") target.blur();
        return;
      }
      if (help && help.open && e.key !== "?") return;
      switch (e.key) {
        case "a": approve(); break;
        case "r": reject(); break;
        case "e": if (toggle) setEditing(editBox.hidden); break;
        case "v": showView(inline && inline.hidden ? "inline" : "side"); break;
        case "j": if (!hunks.move(1)) return; break;
        case "k": if (!hunks.move(-1)) return; break;
        case "x": if (!hunks.toggleFocused()) return; break;
        case "n": go(root.dataset.nextUrl); break;
        case "p": go(root.dataset.previousUrl); break;
        case "?":
          if (!help) return;
          if (help.open) help.close(); else help.showModal();
          break;
        default: return;
      }
      e.preventDefault();
    });

    // Another approver's decision, a vote or an expiry: this page no longer shows the truth.
    return function (change) {
      if (root.dataset.status === "pending" && change && change.approval === root.dataset.approval) {
        document.getElementById("review-stale").hidden = false;
      }
    };
  }

  // --- hunks: each accepted unless rejected (B7) --------------------------------------------
  // The form's "reject hunk" checkboxes are the choice (they work without this script);
  // the buttons on each hunk of the diff and the keys tick them, and the rows show it.
  function hunkChoice() {
    var boxes = Array.prototype.slice.call(document.querySelectorAll('input[name="rejected_hunk"]'));
    var rows = {};
    var buttons = [];
    var focused = null;
    var listeners = [];
    var summary = document.getElementById("hunk-summary");
    document.querySelectorAll("tr[data-hunk]").forEach(function (row) {
      (rows[row.dataset.hunk] = rows[row.dataset.hunk] || []).push(row);
    });
    function boxFor(key) {
      for (var i = 0; i < boxes.length; i++) if (boxes[i].value === key) return boxes[i];
      return null;
    }
    function rejected() {
      return boxes.filter(function (b) { return b.checked; }).length;
    }
    function paint() {
      boxes.forEach(function (box) {
        (rows[box.value] || []).forEach(function (row) {
          row.classList.toggle("hunk-rejected", box.checked);
        });
      });
      buttons.forEach(function (button) {
        var box = boxFor(button.dataset.hunk);
        var rejecting = button.classList.contains("hunk-reject");
        button.setAttribute("aria-pressed", String(Boolean(box && box.checked) === rejecting));
      });
      if (summary && boxes.length) {
        var left = rejected();
        summary.textContent = (boxes.length - left) + " of " + boxes.length + " hunks accepted" +
          (left ? "; the " + left + " rejected " + (left === 1 ? "is" : "are") + " left out." : ".");
      }
      listeners.forEach(function (f) { f(); });
    }
    document.querySelectorAll(".hunk-tools button").forEach(function (button) {
      if (!boxFor(button.dataset.hunk)) return;
      buttons.push(button);
      button.disabled = false;
      button.addEventListener("click", function () {
        boxFor(button.dataset.hunk).checked = button.classList.contains("hunk-reject");
        focus(button.dataset.hunk, false);
        paint();
      });
    });
    boxes.forEach(function (box) { box.addEventListener("change", paint); });
    // The hunk headers of the view on screen, in order.
    function headers() {
      return Array.prototype.filter.call(
        document.querySelectorAll("tr.row-hunk[data-hunk]"),
        function (row) { return row.offsetParent !== null && boxFor(row.dataset.hunk); }
      );
    }
    function focus(key, scroll) {
      focused = key;
      document.querySelectorAll("tr.hunk-focus").forEach(function (row) {
        row.classList.remove("hunk-focus");
      });
      // Both views' header: the focus stays put when v switches the view.
      (rows[key] || []).forEach(function (row) {
        if (!row.classList.contains("row-hunk")) return;
        row.classList.add("hunk-focus");
        if (scroll && row.offsetParent !== null) row.scrollIntoView({block: "center"});
      });
    }
    paint();
    return {
      rejected: rejected,
      allRejected: function () { return boxes.length > 0 && rejected() === boxes.length; },
      sayAllRejected: function () {
        summary.textContent = "Every hunk is rejected: that is a rejection of the whole " +
          "change. Say why in the comment and press Reject.";
        document.getElementById("comment").focus();
      },
      onChange: function (f) { listeners.push(f); f(); },
      // j / k: false when there is no hunk to move to (the key then does nothing).
      move: function (step) {
        var list = headers().map(function (row) { return row.dataset.hunk; });
        if (!list.length || boxes[0].disabled) return false;
        var at = list.indexOf(focused);
        var next = at < 0 ? (step > 0 ? 0 : list.length - 1) : Math.min(Math.max(at + step, 0), list.length - 1);
        focus(list[next], true);
        return true;
      },
      // x: the focused hunk rejected, or accepted again; with none focused, the first.
      toggleFocused: function () {
        if (!focused) return this.move(1);
        var box = boxFor(focused);
        if (!box || box.disabled) return false;
        box.checked = !box.checked;
        paint();
        return true;
      },
      setAside: function (aside) {
        boxes.forEach(function (box) { box.disabled = aside; });
        buttons.forEach(function (button) { button.disabled = aside; });
        var note = document.getElementById("hunk-edit-note");
        if (note) note.hidden = !aside;
        if (summary) summary.hidden = aside;
      }
    };
  }

  // --- every other page of an approver: the navigation's count -------------------------------
  // One socket per page; ``also`` hears each change too (the review page's staleness).
  function countBadge(also) {
    var timer = null;
    function refresh() {
      htmx.ajax("GET", "/approvals/count/", {target: "#nav-approvals-count", swap: "outerHTML"});
    }
    follow(function (change) {
      if (also) also(change);
      clearTimeout(timer);
      timer = setTimeout(refresh, DEBOUNCE_MS);
    }, function () {});
  }

  // Filters pushed to the address bar: after Back, htmx restores the page's markup, not the
  // values chosen in its selects since; put the fields back in step with the address.
  function syncFilters() {
    var params = new URLSearchParams(location.search);
    ["approval-filters", "history-filters"].forEach(function (id) {
      var form = document.getElementById(id);
      if (!form) return;
      Array.prototype.forEach.call(form.elements, function (field) {
        if (!field.name) return;
        field.value = params.get(field.name) || "";
        if (field.tagName === "SELECT" && field.selectedIndex === -1) field.selectedIndex = 0;
      });
    });
  }
  document.addEventListener("htmx:historyRestore", syncFilters);
  window.addEventListener("popstate", function () { setTimeout(syncFilters, 0); });

  function start() {
    var queue = document.getElementById("approval-queue");
    var review = document.getElementById("approval-review");
    var onReviewChange = review ? reviewPage(review) : null;
    if (queue) queuePage(queue);  // its table refresh carries the count too
    else if (document.getElementById("nav-approvals-count")) countBadge(onReviewChange);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
