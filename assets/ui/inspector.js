// The run inspector's one script. It keeps what a page shows current: the run list's rows are
// fetched again every second while the page is visible; a running run's page follows the run's
// events and fetches itself again when they arrive. A fresh copy is parsed by DOMParser (which
// runs no script) and its parts put in place of the old ones: no markup is ever built from
// strings here, and everything in it was escaped by the server.
"use strict";

(function () {
  const parser = new DOMParser();
  const main = document.querySelector("main");
  // The page's own address: a page drawn in answer to a form (a refusal) was drawn at the
  // form's address, which only takes POSTs.
  const page = main && main.dataset.page ? main.dataset.page : null;
  if (page && window.location.pathname !== page) {
    window.history.replaceState(null, "", page);
  }

  // A fresh copy of this page, or null.
  async function fresh() {
    const reply = await fetch(window.location.href, {
      credentials: "same-origin",
      headers: { Accept: "text/html" },
    });
    const kind = reply.headers.get("content-type") || "";
    if (reply.redirected || !kind.startsWith("text/html")) {
      return null;
    }
    return parser.parseFromString(await reply.text(), "text/html");
  }

  // Puts the fresh copy's element matching `selector` in place of this page's.
  function swap(copy, selector) {
    const next = copy.querySelector(selector);
    const current = document.querySelector(selector);
    if (next && current) {
      current.replaceWith(document.adoptNode(next));
    }
  }

  const list = document.querySelector("[data-live-list]");
  if (list) {
    let busy = false;
    setInterval(() => {
      // Not while a person is on the table (a replaced row would take their focus away).
      if (document.hidden || busy || list.contains(document.activeElement)) return;
      busy = true;
      fresh()
        .then((copy) => {
          if (copy && !list.contains(document.activeElement)) {
            swap(copy, "[data-live-part=rows]");
          }
        })
        .catch(() => {})
        .finally(() => { busy = false; });
    }, 1000);
  }

  const run = document.querySelector("[data-live-run]");
  if (run) {
    let url = run.dataset.events;
    if (run.dataset.after) url += "?starting_after=" + encodeURIComponent(run.dataset.after);
    const source = new EventSource(url);
    let timer = null;
    // While the run goes on, its status and timeline; once it stopped or paused, the whole
    // page (its forms change).
    const update = (whole) => {
      timer = null;
      fresh()
        .then((copy) => {
          if (!copy) return;
          const before = document.querySelector("[data-testid=status]");
          const was = before ? before.textContent : "";
          if (whole) {
            swap(copy, "main");
          } else {
            swap(copy, "[data-live-part=summary]");
            swap(copy, "[data-live-part=timeline]");
          }
          // A change of status is said to screen readers (text only).
          const now = document.querySelector("[data-testid=status]");
          const announce = document.querySelector("[data-announce]");
          if (now && announce && now.textContent !== was) {
            announce.textContent = "Status: " + now.textContent;
          }
        })
        .catch(() => {});
    };
    source.onmessage = (event) => {
      if (event.data === "[DONE]") {
        // No reconnection: one last look.
        source.close();
        clearTimeout(timer);
        update(true);
      } else if (timer === null) {
        timer = setTimeout(() => update(false), 250);
      }
    };
  }
})();
