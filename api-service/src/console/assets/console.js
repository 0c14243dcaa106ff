// instance-ha console: keeps the live part of a page (#live) up to date
// over one server-sent-events stream. The server sends `fresh` (the page
// is current), `snapshot` (the whole part), `patch` (elements replaced,
// added or removed by id) and `end` (nothing more will change). The
// stream reconnects by itself; a refused one is tried again, and a page
// whose session has ended says so. Each update is timed with the
// Performance API (`console-update` marks: latency from the server's
// send to the browser's next frame).
(function () {
  "use strict";
  var live = document.getElementById("live");
  var status = document.getElementById("live-status");
  if (!live || !live.dataset.live || !window.EventSource) {
    return;
  }
  var url = live.dataset.live;
  var source = null;
  var ended = false;
  var wait = 1000;
  var timer = null;
  var FOCUSABLE = "a[href],button,input,select,textarea,[tabindex]";

  function say(text) {
    if (status && status.textContent !== text) {
      status.textContent = text;
    }
  }

  // Where the focus is inside `element`, to put it back after a change.
  function focusIndex(element) {
    var active = document.activeElement;
    if (!active || !element.contains(active)) {
      return -1;
    }
    return Array.prototype.indexOf.call(element.querySelectorAll(FOCUSABLE), active);
  }

  function refocus(element, index) {
    if (element && index >= 0) {
      var focusable = element.querySelectorAll(FOCUSABLE);
      if (focusable[index]) {
        focusable[index].focus();
      }
    }
  }

  function apply(ops) {
    for (var i = 0; i < ops.length; i++) {
      var op = ops[i];
      var element = document.getElementById(op.id);
      if (op.html === undefined) {
        if (element) {
          element.remove();
        }
        continue;
      }
      if (element) {
        var index = focusIndex(element);
        element.outerHTML = op.html;
        refocus(document.getElementById(op.id), index);
        continue;
      }
      var parent = op.parent ? document.getElementById(op.parent) : null;
      if (parent) {
        parent.insertAdjacentHTML(op.at === "start" ? "afterbegin" : "beforeend", op.html);
      }
    }
  }

  // `applied`: milliseconds spent changing the page; `ops`: how many
  // elements changed.
  function measure(sentAt, applied, ops) {
    window.requestAnimationFrame(function () {
      if (!window.performance || !performance.mark) {
        return;
      }
      performance.mark("console-update", {
        detail: { latency: Date.now() - sentAt, applied: applied, ops: ops }
      });
      if (performance.getEntriesByName("console-update").length > 2000) {
        performance.clearMarks("console-update");
      }
    });
  }

  function later() {
    if (timer === null && !ended) {
      timer = window.setTimeout(check, wait);
      wait = Math.min(wait * 2, 8000);
    }
  }

  // After a refused stream: is the session still good? A page that
  // redirects to the login has ended; one that answers is tried again.
  function check() {
    timer = null;
    fetch(window.location.pathname + window.location.search, {
      method: "HEAD",
      credentials: "same-origin",
      redirect: "manual",
      cache: "no-store"
    }).then(function (response) {
      if (response.type === "opaqueredirect" || response.status === 401) {
        ended = true;
        say("Your session has ended: sign in again to follow this page.");
      } else if (response.ok) {
        connect();
      } else {
        later();
      }
    }, later);
  }

  function connect() {
    source = new EventSource(url);
    source.addEventListener("open", function () {
      wait = 1000;
      say("Live");
    });
    source.addEventListener("fresh", function () {
      say("Live");
    });
    source.addEventListener("snapshot", function (event) {
      var data = JSON.parse(event.data);
      var start = performance.now();
      var index = focusIndex(live);
      live.innerHTML = data.html;
      refocus(live, index);
      measure(data.sent_at, performance.now() - start, -1);
      say("Live");
    });
    source.addEventListener("patch", function (event) {
      var data = JSON.parse(event.data);
      var start = performance.now();
      apply(data.ops);
      measure(data.sent_at, performance.now() - start, data.ops.length);
    });
    source.addEventListener("end", function () {
      ended = true;
      source.close();
      say("Ended: nothing more will change on this page.");
    });
    source.onerror = function () {
      if (ended) {
        return;
      }
      say("Reconnecting…");
      if (source.readyState === EventSource.CLOSED) {
        later();
      }
    };
  }

  connect();
})();
