// The evals page follows /ws/evals/ with htmx's WebSocket extension: the server sends the
// progress of the suite run as an out-of-band fragment when it connects and whenever a
// case is judged. This file only says whether the page is live.
(function () {
  "use strict";
  var REASONS = {4401: "not logged in", 4403: "not allowed"};
  function setStatus(text, cls) {
    var el = document.getElementById("eval-live-status");
    if (!el) return;
    el.textContent = text;
    el.className = "live-status " + (cls || "");
  }
  document.body.addEventListener("htmx:wsOpen", function () { setStatus("live", "ok"); });
  document.body.addEventListener("htmx:wsClose", function (e) {
    var code = e.detail && e.detail.event ? e.detail.event.code : 0;
    setStatus(REASONS[code] || "reconnecting…", "off");
  });
})();
