// Links marked data-history-back go back one page, to the form as the person left it
// (the console's Content-Security-Policy runs no script in a URL). Without a history, the
// link's own href is followed.
(function () {
  "use strict";
  document.addEventListener("click", function (event) {
    var link = event.target.closest && event.target.closest("a[data-history-back]");
    if (!link || window.history.length < 2) return;
    event.preventDefault();
    window.history.back();
  });
})();
