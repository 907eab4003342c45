// The search page's keyboard: j/k (or the arrows) select a hit, y marks it relevant, n not
// relevant, / goes back to the question; the mark is posted without leaving the page. The page works without this script:
// each hit's buttons post the same form.
"use strict";
(() => {
  const hits = () => Array.from(document.querySelectorAll("article.hit"));
  let current = -1;

  function select(i, scroll = true) {
    const all = hits();
    if (!all.length) return;
    current = Math.max(0, Math.min(all.length - 1, i));
    all.forEach((h, k) => h.classList.toggle("selected", k === current));
    if (scroll) all[current].scrollIntoView({ block: "nearest", behavior: "smooth" });
  }

  // What went wrong, in words: the API's "detail" (or "error"), else the status.
  async function reason(answer) {
    const text = await answer.text();
    try {
      const body = JSON.parse(text);
      const said = body.detail ?? body.error;
      if (typeof said === "string") return said;
      if (Array.isArray(said)) return said.map((d) => d.msg || String(d)).join("; ");
    } catch (_) { /* not JSON: the text itself */ }
    return text.trim().slice(0, 200) || `the server answered ${answer.status}`;
  }

  async function mark(article, verdict) {
    const form = article.querySelector("form.mark");
    if (!form) return;
    const body = new URLSearchParams(new FormData(form));
    body.set("verdict", verdict);
    const state = form.querySelector(".state");
    state.classList.remove("failed");
    let problem = "";
    try {
      const answer = await fetch(form.action, { method: "POST", body, headers: { "X-Requested-With": "situate" },
                                                 credentials: "same-origin" });
      if (answer.ok) {
        article.classList.remove("relevant", "not");
        article.classList.add(verdict);
        state.textContent = verdict === "relevant" ? "marked relevant" : "marked not relevant";
        const count = document.querySelector(".labelled-count");
        const now = (await answer.json()).labelled;
        if (count && Number.isInteger(now)) count.textContent = now;
        return;
      }
      problem = await reason(answer);
    } catch (error) {
      problem = `the server could not be reached (${error.message})`;
    }
    state.textContent = "Not saved: " + problem;
    state.classList.add("failed");
    state.scrollIntoView({ block: "nearest" });
  }

  // A click anywhere on a hit (its buttons too) selects it: the next key acts on what was clicked.
  document.addEventListener("click", (event) => {
    const article = event.target.closest && event.target.closest("article.hit");
    if (article) select(hits().indexOf(article), false);
  });

  document.addEventListener("submit", (event) => {  // a button clicked: the same post, no reload
    const form = event.target;
    if (!form.classList.contains("mark")) return;
    event.preventDefault();
    mark(form.closest("article.hit"), event.submitter ? event.submitter.value : "relevant");
  });

  // Results shown: the keys mark them at once. The question box is not focused when there are
  // hits (no autofocus then); blurred again once the page has loaded, whatever focused it.
  function leaveTheQuestion() {
    if (!hits().some((h) => h.querySelector("form.mark"))) return;
    if (document.activeElement && document.activeElement.name === "q") document.activeElement.blur();
    if (current < 0) select(0, false);
  }
  document.addEventListener("DOMContentLoaded", leaveTheQuestion);
  window.addEventListener("load", leaveTheQuestion);

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
