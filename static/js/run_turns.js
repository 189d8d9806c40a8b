// The run page's "Context per turn" chart: drawn from the JSON beside it (the console's
// Content-Security-Policy allows no inline script), and again whenever the live page
// swaps the run's panel in anew (htmx), which brings a new chart with the new turns.
(function () {
  "use strict";
  function draw() {
    var div = document.getElementById("turns-plot");
    var source = div && document.getElementById(div.dataset.figure);
    if (!source || typeof Plotly === "undefined") return;
    var figure = JSON.parse(source.textContent);
    Plotly.newPlot(div, figure.data, figure.layout, {responsive: true, displaylogo: false});
  }
  document.addEventListener("htmx:afterSettle", draw);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
