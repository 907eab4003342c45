// The search page's keyboard: j/k (or the arrows) select a hit, y marks it relevant, n not
// relevant, / goes back to the question; the mark is posted without leaving the page. The page works without this script:
// each hit's buttons post the same form.
"use strict";
(() => {
  const hits = () => Array.from(document.querySelectorAll("article.hit"));
  let current = -1;

  function select(i) {
    const all = hits();
    if (!all.length) return;
    current = Math.max(0, Math.min(all.length - 1, i));
    all.forEach((h, k) => h.classList.toggle("selected", k === current));
    all[current].scrollIntoView({ block: "nearest", behavior: "smooth" });
  }

  async function mark(article, verdict) {
    const form = article.querySelector("form.mark");
    if (!form) return;
    const body = new URLSearchParams(new FormData(form));
    body.set("verdict", verdict);
    const answer = await fetch(form.action, { method: "POST", body, headers: { "X-Requested-With": "situate" },
                                               credentials: "same-origin" });
    const state = form.querySelector(".state");
    if (answer.ok) {
      article.classList.remove("relevant", "not");
      article.classList.add(verdict);
      state.textContent = verdict === "relevant" ? "marked relevant" : "marked not relevant";
    } else {
      state.textContent = "not saved: " + (await answer.text()).slice(0, 200);
    }
  }

  document.addEventListener("submit", (event) => {  // a button clicked: the same post, no reload
    const form = event.target;
    if (!form.classList.contains("mark")) return;
    event.preventDefault();
    mark(form.closest("article.hit"), event.submitter ? event.submitter.value : "relevant");
  });

  document.addEventListener("DOMContentLoaded", () => {  // results shown: the keys mark them at once
    if (hits().some((h) => h.querySelector("form.mark"))) {
      document.activeElement.blur();
      select(0);
    }
  });

  document.addEventListener("keydown", (event) => {
    const typing = ["INPUT", "SELECT", "TEXTAREA"].includes(document.activeElement.tagName);
    if (event.key === "Escape" && typing) { document.activeElement.blur(); return; }
    if (typing || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === "/") { document.querySelector("input[name=q]").focus(); event.preventDefault(); return; }
    if (event.key === "j" || event.key === "ArrowDown") { select(current + 1); event.preventDefault(); }
    else if (event.key === "k" || event.key === "ArrowUp") { select(current - 1); event.preventDefault(); }
    else if ((event.key === "y" || event.key === "n") && current >= 0) {
      mark(hits()[current], event.key === "y" ? "relevant" : "not");
    }
  });
})();
