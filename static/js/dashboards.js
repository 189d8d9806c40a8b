// The dashboards. Charts arrive as JSON beside an empty div (no inline script): this file
// draws them with the local plotly.js, and a click on a bar or a point opens the runs list
// the server put in that point's customdata. The operations page follows
// /ws/dashboards/ops/, which says only that some run changed: the page then fetches its
// fragment again through the ordinary view, at most about once a second.
(function () {
  "use strict";
  var CONFIG = {
    displaylogo: false,
    responsive: true,
    // No "share" or "edit in Chart Studio": they would upload the figure to Plotly's cloud.
    showSendToCloud: false,
    showEditInChartStudio: false,
    showLink: false,
    modeBarButtonsToRemove: ["lasso2d", "select2d", "autoScale2d", "sendDataToCloud"]
  };
  var MIN_GAP_MS = 1000;      // at most one refresh a second, however busy the console is
  var POLL_MS = 30000;        // ages and stuck runs change without any event
  var RETRY_MIN_MS = 500;
  var RETRY_MAX_MS = 10000;
  var CLOSE_REASONS = {4401: "not logged in", 4403: "not allowed"};

  function runsUrl(point) {
    var url = point && point.customdata;
    // Only our own runs list: a value that is not a local path is never followed.
    return typeof url === "string" && url.charAt(0) === "/" && url.charAt(1) !== "/" ? url : null;
  }

  function drawChart(div) {
    var source = document.getElementById(div.dataset.figure);
    if (!source || div.dataset.drawn || !div.isConnected) return;
    var figure;
    try { figure = JSON.parse(source.textContent); } catch (ignored) { return; }
    div.dataset.drawn = "1";
    Plotly.newPlot(div, figure.data, figure.layout, CONFIG).then(function () {
      div.on("plotly_click", function (event) {
        var url = runsUrl(event && event.points && event.points[0]);
        if (url) window.location.assign(url);
      });
    });
  }

  // One chart per task, in the page's order, each after the browser painted the one
  // before: the first chart shows as soon as it is drawn, not once all nine of a
  // retrospective are (issue 19: time to the first chart, bench/first_chart.py).
  function drawCharts(root) {
    if (typeof Plotly === "undefined") return;
    var queue = Array.prototype.slice.call(root.querySelectorAll("[data-figure]"));
    function next() {
      if (!queue.length) return;
      drawChart(queue.shift());
      requestAnimationFrame(function () { setTimeout(next, 0); });
    }
    next();
  }

  function purgeCharts(root) {
    if (typeof Plotly === "undefined") return;
    root.querySelectorAll(".js-plotly-plot").forEach(function (div) { Plotly.purge(div); });
  }

  function setStatus(text, cls) {
    var el = document.getElementById("ops-live-status");
    if (!el) return;
    el.textContent = text;
    el.className = "live-status " + (cls || "");
  }

  // Calls onChange() for each notice, and each time the socket opens: what changed between
  // the page's rendering (or the last socket) and now was not heard. Reconnects with a
  // doubling delay, unless the server said who may not listen.
  var connected = false;
  function follow(path, onChange) {
    var delay = RETRY_MIN_MS;
    function connect() {
      var scheme = location.protocol === "https:" ? "wss://" : "ws://";
      var socket = new WebSocket(scheme + location.host + path);
      socket.onopen = function () {
        delay = RETRY_MIN_MS;
        connected = true;
        setStatus("live", "ok");
        onChange();
      };
      socket.onmessage = function (message) {
        var data = null;
        try { data = JSON.parse(message.data); } catch (ignored) { return; }
        if (data && data.type === "changed") onChange();
      };
      socket.onclose = function (e) {
        connected = false;
        if (CLOSE_REASONS[e.code]) { setStatus(CLOSE_REASONS[e.code], "off"); return; }
        setStatus("reconnecting", "off");
        setTimeout(connect, delay);
        delay = Math.min(delay * 2, RETRY_MAX_MS);
      };
    }
    connect();
  }

  function opsPage(box) {
    var last = 0;
    var timer = null;
    var busy = false;
    var again = false;
    function refresh() {
      timer = null;
      if (busy) { again = true; return; }
      busy = true;
      last = Date.now();
      fetch(box.dataset.fragmentUrl, {
        headers: {"HX-Request": "true"},
        credentials: "same-origin",
        cache: "no-store"
      }).then(function (response) {
        if (!response.ok || response.redirected) throw new Error("status " + response.status);
        return response.text();
      }).then(function (html) {
        purgeCharts(box);
        box.innerHTML = html;
        drawCharts(box);
        if (connected) setStatus("live", "ok");
      }).catch(function () {
        setStatus("could not update", "error");
      }).then(function () {
        busy = false;
        if (again) { again = false; schedule(); }
      });
    }
    function schedule() {
      if (timer !== null) return;
      timer = setTimeout(refresh, Math.max(0, last + MIN_GAP_MS - Date.now()));
    }
    last = Date.now();  // the page itself was just rendered
    follow(box.dataset.socketPath, schedule);
    setInterval(schedule, POLL_MS);
  }

  // The retrospective's charts: fetched from the address the page names (its head has
  // already asked for it, beside plotly.js), put in place and drawn.
  function retroPage(box) {
    fetch(box.dataset.chartsUrl, {credentials: "same-origin"}).then(function (response) {
      if (!response.ok || response.redirected) throw new Error("status " + response.status);
      return response.text();
    }).then(function (html) {
      box.innerHTML = html;
      box.removeAttribute("aria-busy");
      drawCharts(box);
    }).catch(function () {
      var said = document.getElementById("retro-loading");
      if (said) {
        said.textContent = "The figures could not be read; reload the page to try again.";
        said.className = "error";
        said.setAttribute("role", "alert");
      }
      box.removeAttribute("aria-busy");
    });
  }

  function start() {
    var retro = document.getElementById("retro-charts");
    if (retro && retro.dataset.chartsUrl) retroPage(retro);
    drawCharts(document);
    var box = document.getElementById("ops-live");
    if (box) opsPage(box);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
