// Keeps a campaign page current: swaps in the parts its event stream sends. The page reads
// whole without this script; every number in a part was rendered by the server. A hidden tab
// lets go of its stream (browsers allow few connections per server) and takes it up again
// when shown.
(function () {
  "use strict";
  var status = document.getElementById("live-status");
  var url = status && status.getAttribute("data-live");
  if (!url || !window.EventSource) return;
  var source = null;
  var over = false;

  function stop(text) {
    if (source) source.close();
    source = null;
    status.textContent = text;
  }

  function connect() {
    if (source || over) return;
    source = new EventSource(url);
    status.textContent = "connecting…";
    source.addEventListener("open", function () {
      status.textContent = "live";
    });
    source.addEventListener("parts", function (e) {
      var d = JSON.parse(e.data);
      Object.keys(d.parts).forEach(function (id) {
        var el = document.getElementById(id);
        if (el) el.innerHTML = d.parts[id];
      });
      status.textContent = "live · " + d.state + " · updated " + new Date().toLocaleTimeString();
    });
    source.addEventListener("end", function (e) {
      over = true;
      stop("campaign " + e.data);
      var actions = document.querySelectorAll(".actions .button");
      Array.prototype.forEach.call(actions, function (a) { a.remove(); });
    });
    // The server ends the stream after a problem; the browser reconnects by itself.
    source.addEventListener("problem", function (e) {
      status.textContent = "live updates paused: " + e.data + " (retrying)";
    });
    source.addEventListener("expired", function () {
      over = true;
      stop("your session ended: reload to log in again");
    });
    source.onerror = function () {
      if (!source) return;
      if (source.readyState === EventSource.CLOSED) {
        stop("live updates stopped: reload the page");
      } else {
        status.textContent = "reconnecting…";
      }
    };
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) stop("paused while hidden");
    else connect();
  });
  connect();
})();
