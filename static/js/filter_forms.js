// A filter form (form.filters) sends a text box's words once, with Enter (the form's
// submit); its selects and dates send on "change". A change of a text box, which Chromium
// fires with that Enter and again when the box loses focus, would send the same filter a
// second time, and that second answer, arriving after a click on "older" or a run, pushed
// its address over the page being opened and cancelled it. A text box's change stops here.
(function () {
  "use strict";
  document.addEventListener(
    "change",
    function (event) {
      var box = event.target;
      if (!box || !box.form || !box.form.classList.contains("filters")) return;
      if (box.tagName === "INPUT" && (box.type === "search" || box.type === "text")) {
        event.stopPropagation();
      }
    },
    true
  );
})();
