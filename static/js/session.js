// A page whose user signed out (in another tab, say) says so plainly and disables what it
// offers (issue 19), instead of swapping the login page into a panel or failing silently:
// on a live socket closed as "not logged in" (4401), or an htmx request that was sent on
// to the login page.
(function () {
  var ended = false;
  var login = document.body.dataset.loginUrl || "/login/";
  function signedOut() {
    if (ended) return;
    ended = true;
    var main = document.querySelector("main");
    if (!main) return;
    var note = document.createElement("p");
    note.id = "signed-out";
    note.className = "failure";
    note.setAttribute("role", "alert");
    var next = encodeURIComponent(location.pathname + location.search);
    note.append("You are signed out (perhaps in another tab): nothing on this page can be done until you ");
    var link = document.createElement("a");
    link.href = login + "?next=" + next;
    link.textContent = "sign in again";
    note.append(link, ".");
    main.prepend(note);
    main.querySelectorAll("button, input, select, textarea").forEach(function (el) {
      el.disabled = true;
    });
    main.querySelectorAll("[hx-trigger], [hx-get], [hx-post]").forEach(function (el) {
      el.removeAttribute("hx-trigger");
    });
  }
  document.body.addEventListener("htmx:wsClose", function (e) {
    var code = e.detail && e.detail.event ? e.detail.event.code : 0;
    if (code === 4401) signedOut();
  });
  document.body.addEventListener("htmx:beforeSwap", function (e) {
    var url = e.detail.xhr && e.detail.xhr.responseURL;
    if (url && new URL(url).pathname === login) {
      e.detail.shouldSwap = false;
      signedOut();
    }
  });
})();
