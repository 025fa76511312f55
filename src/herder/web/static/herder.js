// herder's live updates: the page's live region follows the changes the server streams (server-sent
// events fed by the API's watches). Changes are coalesced into at most one refresh in flight; a refresh
// asks for the live region only (X-Herder-Live), never the whole page, and waits while a form in it is
// being filled in, so that nothing typed is lost.
(function () {
  "use strict";
  var main = document.getElementById("main");
  var live = document.getElementById("live");
  var state = document.getElementById("live-state");
  if (!main || !live || !main.dataset.watch || !window.EventSource) return;
  var rv = main.dataset.rv;
  var timer = null, busy = false, pending = false, source = null;

  function say(text) {
    state.hidden = !text;
    state.textContent = text;
  }

  function editing() {
    var el = document.activeElement;
    return !!(el && live.contains(el) && /^(INPUT|SELECT|TEXTAREA)$/.test(el.tagName));
  }

  function schedule() {
    if (!timer) timer = setTimeout(refresh, 150);
  }

  function refresh() {
    timer = null;
    if (busy || editing()) { pending = true; return; }
    busy = true;
    pending = false;
    fetch(window.location.href, { headers: { "X-Herder-Live": "1" }, credentials: "same-origin" })
      .then(function (response) {
        if (response.redirected || response.status === 401) { window.location.reload(); return null; }
        // A refusal (the object is gone, access was taken away) is shown; a server failure is not,
        // and is not retried at once either: the next change tries again.
        if (response.status >= 500) return null;
        return response.text();
      })
      .then(function (html) {
        if (html === null) return;
        live.innerHTML = html;
        main.dataset.refreshed = String(Date.now());
      })
      .catch(function () { /* unreachable now: the stream's reconnection refreshes */ })
      .then(function () {
        busy = false;
        if (pending) schedule();
      });
  }

  function listen() {
    var url = main.dataset.events + "?watch=" + encodeURIComponent(main.dataset.watch) + "&rv=" + encodeURIComponent(rv);
    source = new EventSource(url);
    function changed(event) {
      try { rv = JSON.parse(event.data).rv || rv; } catch (e) { /* keep the last revision */ }
      say("");
      schedule();
    }
    source.addEventListener("change", changed);
    source.addEventListener("relist", changed);
    // The session ended (signed out, the account disabled): the page reloads to the sign-in page.
    source.addEventListener("signedout", function () {
      source.close();
      window.location.reload();
    });
    source.addEventListener("ended", function () {
      source.close();
      say("Live updates ended: reload the page.");
    });
    source.onerror = function () {
      // Reconnect from the last revision seen (EventSource would start over from the page's), and
      // refresh once: changes may have come while the stream was down.
      source.close();
      say("Reconnecting…");
      setTimeout(function () { listen(); schedule(); }, 2000);
    };
  }

  live.addEventListener("focusout", function () { if (pending) schedule(); });
  listen();
})();

// A machine's page: its log view follows the lines herder keeps as they come (server-sent events), kept
// scrolled to the newest unless the reader scrolled up, and bounded so a chatty service cannot grow the
// page without end.
(function () {
  "use strict";
  var log = document.getElementById("machine-log");
  var state = document.getElementById("log-state");
  if (!log || !log.dataset.stream || !window.EventSource) return;
  var MAX_LINES = 5000;
  var source = new EventSource(log.dataset.stream);
  log.scrollTop = log.scrollHeight;

  function say(text) {
    state.hidden = !text;
    state.textContent = text;
  }

  source.addEventListener("line", function (event) {
    var atEnd = log.scrollHeight - log.scrollTop - log.clientHeight < 24;
    log.appendChild(document.createTextNode(JSON.parse(event.data) + "\n"));
    while (log.childNodes.length > MAX_LINES) log.removeChild(log.firstChild);
    if (atEnd) log.scrollTop = log.scrollHeight;
    say("");
  });
  source.addEventListener("ended", function (event) {
    source.close();
    say("The log stopped following: " + JSON.parse(event.data) + ". Reload the page to follow it again.");
  });
  source.onerror = function () { say("Reconnecting…"); };
})();
