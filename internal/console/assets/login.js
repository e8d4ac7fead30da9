// A one-time link carries its code in the fragment (never sent in a
// request line, never logged): post it and forget it. The link may open
// on this page already shown (only the fragment changes): hashchange.
// The code is posted without a click only when a2ad marked the page so
// (data-autopost: the operator opened it, Sec-Fetch-Site none); a page
// another page navigated to shows a button instead (no login CSRF).
"use strict";
function postCode() {
  var m = /^#code=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (!m) { return; }
  history.replaceState(null, "", location.pathname);
  document.getElementById("code").value = m[1];
  var form = document.getElementById("code-form");
  if (document.body.dataset.autopost === "1") { form.submit(); return; }
  form.hidden = false;
}
window.addEventListener("hashchange", postCode);
postCode();
