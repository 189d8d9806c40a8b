// A filter form (form.filters) sends a text box's words once, with Enter (the form's
// submit); its selects and dates send on "change". Chromium fires a text box's change
// with that Enter, just before the submit, so the form sent the same filter twice, and
// the second answer, arriving after a click on "older" or a run, pushed its address over
// the page being opened and cancelled it. A text box's change stops here: words typed and
// left without Enter (or cleared with the box's ×) apply at the next Enter.
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
