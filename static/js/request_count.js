// The request box shows its limit as you type (issue 19): characters counted as the
// server counts them (code points, not UTF-16 units), and a warning near the limit.
(function () {
  const box = document.querySelector("#run-form textarea[name=request]");
  const out = document.getElementById("request-count");
  if (!box || !out) return;
  const limit = Number(out.dataset.limit);
  const shown = new Intl.NumberFormat("en");
  function update() {
    const used = Array.from(box.value).length;
    out.textContent = `${shown.format(used)} of ${shown.format(limit)} characters`;
    out.classList.toggle("error", used > limit * 0.95);
  }
  box.addEventListener("input", update);
  update();
})();
