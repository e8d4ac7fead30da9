// A one-time link carries its code in the fragment (never sent in a
// request line, never logged): post it and forget it.
"use strict";
(function () {
  var m = /^#code=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (!m) { return; }
  history.replaceState(null, "", location.pathname);
  document.getElementById("code").value = m[1];
  document.getElementById("code-form").submit();
})();
