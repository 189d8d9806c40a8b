// The admin's prompt preview: draws the layer budget chart from the JSON beside it (the
// console's Content-Security-Policy allows no inline script), then fits it again once the
// admin's sidebar has settled the content width.
(function () {
  "use strict";
  function draw() {
    var div = document.getElementById("budget-plot");
    var source = div && document.getElementById(div.dataset.figure);
    if (!source || typeof Plotly === "undefined") return;
    var figure = JSON.parse(source.textContent);
    Plotly.newPlot(div, figure.data, figure.layout, {responsive: true, displaylogo: false});
    window.addEventListener("load", function () { Plotly.Plots.resize(div); });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
