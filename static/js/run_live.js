// The run page's live timeline. htmx's WebSocket extension reconnects with the URL it was
// first given; rewrite `after` to the last event this page holds, so a reconnect replays
// only what the page missed. Events the page already holds are dropped as a second guard.
(function () {
  "use strict";
  function lastSeq() {
    var marker = document.getElementById("run-last-seq");
    return marker ? parseInt(marker.dataset.seq || "0", 10) || 0 : 0;
  }
  var create = htmx.createWebSocket;
  htmx.createWebSocket = function (url) {
    var u = new URL(url, window.location.href);
    if (u.pathname.indexOf("/ws/runs/") === 0) u.searchParams.set("after", String(lastSeq()));
    return create(u.toString());
  };
  function setStatus(text, cls) {
    var el = document.getElementById("run-live-status");
    if (!el || el.classList.contains("error")) return;
    el.textContent = text;
    el.className = "live-status " + (cls || "");
  }
  document.body.addEventListener("htmx:wsOpen", function () { setStatus("live", "ok"); });
  document.body.addEventListener("htmx:wsClose", function (e) {
    var code = e.detail && e.detail.event ? e.detail.event.code : 0;
    var reasons = {4401: "not logged in", 4403: "not allowed", 4404: "run not found"};
    setStatus(reasons[code] || "reconnecting…", "off");
  });
  // Events that change what a person can do here (approve, answer, cancel, roll back)
  // refresh the run's panel of actions, so buttons appear and go without a reload.
  var PANEL_EVENTS = ["status.changed", "approval.requested", "approval.decided",
    "approval.invalidated", "tool.call", "stage.finished", "task.structured", "grant.created",
    "grant.revoked", "run.cancel_requested"];
  document.body.addEventListener("htmx:wsBeforeMessage", function (e) {
    var tpl = document.createElement("template");
    tpl.innerHTML = e.detail.message;
    var items = tpl.content.querySelectorAll("li[data-seq]");
    if (items.length && parseInt(items[items.length - 1].dataset.seq, 10) <= lastSeq()) {
      e.preventDefault();
      return;
    }
    for (var i = 0; i < items.length; i++) {
      if (PANEL_EVENTS.indexOf(items[i].dataset.type) >= 0) {
        setTimeout(function () { htmx.trigger(document.body, "run-changed"); }, 0);
        break;
      }
    }
  });
  // A value cut in its line (runs/templatetags/events.py) shows its whole text, the
  // title's, in the same line when clicked, and its cut again on a second click.
  function toggleCut(cut) {
    var open = cut.getAttribute("aria-expanded") === "true";
    if (!open) cut.dataset.cut = cut.textContent;
    cut.textContent = open ? cut.dataset.cut : cut.title;
    cut.setAttribute("aria-expanded", open ? "false" : "true");
  }
  var timeline = document.getElementById("run-timeline");
  if (timeline) {
    timeline.addEventListener("click", function (e) {
      var cut = e.target.closest ? e.target.closest(".cut") : null;
      if (cut) toggleCut(cut);
    });
    timeline.addEventListener("keydown", function (e) {
      if ((e.key === "Enter" || e.key === " ") && e.target.classList.contains("cut")) {
        e.preventDefault();
        toggleCut(e.target);
      }
    });
  }
})();
