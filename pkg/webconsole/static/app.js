// agentbus console: the live turn list of a session page and confirmations. No framework:
// the server renders everything; this only swaps the turn list when the bus says it changed.
(function () {
  "use strict";
  document.addEventListener("submit", function (e) {
    var msg = e.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) e.preventDefault();
  });
  var turns = document.getElementById("turns");
  if (!turns || !window.EventSource) return;
  var dot = document.getElementById("live");
  var pending = null, busy = false, again = false;
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(turns.getAttribute("data-src"), { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) { turns.innerHTML = html; })
      .catch(function () {})
      .then(function () { busy = false; if (again) { again = false; refresh(); } });
  }
  var es = new EventSource(turns.getAttribute("data-events"));
  es.onopen = function () { if (dot) dot.classList.add("on"); };
  es.onerror = function () { if (dot) dot.classList.remove("on"); };
  es.addEventListener("change", function () {
    clearTimeout(pending);
    pending = setTimeout(refresh, 250);
  });
})();
