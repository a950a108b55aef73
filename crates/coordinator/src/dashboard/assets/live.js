// Keeps a campaign page current: swaps in the parts its event stream sends. The page reads
// whole without this script; every number in a part was rendered by the server.
(function () {
  "use strict";
  var status = document.getElementById("live-status");
  var url = status && status.getAttribute("data-live");
  if (!url || !window.EventSource) return;
  var source = new EventSource(url);
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
    source.close();
    status.textContent = "campaign " + e.data;
    var actions = document.querySelectorAll(".actions .button");
    Array.prototype.forEach.call(actions, function (a) { a.remove(); });
  });
  // The server ends the stream after a problem; the browser reconnects by itself.
  source.addEventListener("problem", function (e) {
    status.textContent = "live updates paused: " + e.data + " (retrying)";
  });
  source.addEventListener("expired", function () {
    source.close();
    status.textContent = "your session ended: reload to log in again";
  });
  source.onerror = function () {
    if (source.readyState !== EventSource.CLOSED) status.textContent = "reconnecting…";
  };
})();
