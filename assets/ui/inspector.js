// The run inspector's one script. It keeps what a page shows current: the run list is
// fetched again every second while the page is visible; a running run's page follows the run's
// events and fetches itself again when they arrive. A fresh copy is parsed by DOMParser (which
// runs no script) and put in place of the old one: no markup is ever built from strings here,
// and everything in it was escaped by the server.
"use strict";

(function () {
  const parser = new DOMParser();

  // Replaces the element matching `selector` by the same element of a fresh copy of the page.
  async function refresh(selector) {
    const reply = await fetch(window.location.href, {
      credentials: "same-origin",
      headers: { Accept: "text/html" },
    });
    if (reply.redirected || !reply.headers.get("content-type")?.startsWith("text/html")) {
      return;
    }
    const fresh = parser.parseFromString(await reply.text(), "text/html").querySelector(selector);
    const current = document.querySelector(selector);
    if (fresh && current) {
      current.replaceWith(document.adoptNode(fresh));
    }
  }

  const list = document.querySelector("[data-live-list]");
  if (list) {
    let busy = false;
    setInterval(() => {
      if (document.hidden || busy) return;
      busy = true;
      refresh("[data-live-list]").catch(() => {}).finally(() => { busy = false; });
    }, 1000);
  }

  const run = document.querySelector("[data-live-run]");
  if (run) {
    let url = run.dataset.events;
    if (run.dataset.after) url += "?starting_after=" + encodeURIComponent(run.dataset.after);
    const source = new EventSource(url);
    let timer = null;
    const update = () => {
      timer = null;
      refresh("main").catch(() => {});
    };
    source.onmessage = (event) => {
      if (event.data === "[DONE]") {
        // The run stopped or paused: one last look, and no reconnection.
        source.close();
        clearTimeout(timer);
        update();
      } else if (timer === null) {
        timer = setTimeout(update, 250);
      }
    };
  }
})();
