// A one-time link carries its code in the fragment (never sent in a
// request line, never logged): post it and forget it. The link may open
// on this page already shown (only the fragment changes): hashchange.
"use strict";
function postCode() {
  var m = /^#code=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (!m) { return; }
  history.replaceState(null, "", location.pathname);
  document.getElementById("code").value = m[1];
  document.getElementById("code-form").submit();
}
window.addEventListener("hashchange", postCode);
postCode();
