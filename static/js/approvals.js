// The approval pages. The queue follows /ws/approvals/, which says only that some request
// changed: the page then fetches its table again through the ordinary view (same filters),
// so what it shows is what the database and that view's checks say. The review page
// switches the diff view, opens the patch editor and takes keyboard shortcuts.
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

    function setEditing(open) {
      if (!toggle) return;
      editBox.hidden = !open;
      patch.disabled = !open;  // a closed editor sends nothing: an ordinary approval
      toggle.setAttribute("aria-expanded", String(open));
      var button = document.getElementById("approve");
      if (button) button.textContent = open ? "Approve the edited patch" : "Approve";
      if (open) patch.focus();
    }
    if (toggle) {
      toggle.addEventListener("click", function () { setEditing(editBox.hidden); });
    }

    function approve() {
      if (!form) return;
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
        }
      });
    }
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
        case "n": case "j": go(root.dataset.nextUrl); break;
        case "k": go(root.dataset.previousUrl); break;
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
