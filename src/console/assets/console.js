// The slipway console's only script: a build log that follows its deploy until it finishes, copy buttons, and
// times worded relative to now (the exact time stays as their title).
"use strict";

function followLog(pre) {
  const source = pre.dataset.source;
  const statusEl = document.getElementById(pre.dataset.statusId);
  let offset = Number(pre.dataset.offset || "0");
  let status = pre.dataset.status;
  async function poll() {
    if (status === "success" || status === "failed") return;
    try {
      const res = await fetch(source + "?offset=" + offset, { credentials: "same-origin", headers: { accept: "application/json" } });
      if (res.ok) {
        const window = await res.json();
        if (window.log) {
          pre.append(document.createTextNode(window.log));
          pre.scrollTop = pre.scrollHeight;
        }
        offset = window.next_offset;
        const finished = document.getElementById("deploy-finished");
        if (finished && window.finished_at) finished.textContent = window.finished_at;
        status = window.status;
        pre.dataset.status = status;
        if (statusEl && statusEl.textContent !== window.word) {
          statusEl.textContent = window.word;
          statusEl.className = "status status-" + window.word;
        }
        // Whatever is left of the log once it finished is read before stopping.
        if ((status === "success" || status === "failed") && offset >= window.log_bytes) return;
      }
    } catch (e) {
      // The next poll tries again.
    }
    setTimeout(poll, 1000);
  }
  setTimeout(poll, 500);
}

// How long ago (or how far ahead) `then` is, in words; null beyond a month, where the date itself reads better.
function relative(then, now) {
  const seconds = Math.round((now - then) / 1000);
  const ahead = seconds < 0;
  const s = Math.abs(seconds);
  let words;
  if (s < 45) return ahead ? "in a moment" : "just now";
  else if (s < 3600) words = Math.round(s / 60) + " min";
  else if (s < 86400) words = Math.round(s / 3600) + " h";
  else if (s < 30 * 86400) { const d = Math.round(s / 86400); words = d + (d === 1 ? " day" : " days"); }
  else return null;
  return ahead ? "in " + words : words + " ago";
}

function wordTimes() {
  const now = Date.now();
  document.querySelectorAll("time[datetime]").forEach((el) => {
    if (!el.dataset.exact) el.dataset.exact = el.textContent;
    const words = relative(Date.parse(el.getAttribute("datetime")), now);
    el.title = el.dataset.exact;
    el.textContent = words || el.dataset.exact;
  });
}

document.addEventListener("DOMContentLoaded", () => {
  wordTimes();
  setInterval(wordTimes, 30000);
  document.querySelectorAll("pre[data-source]").forEach(followLog);
  document.querySelectorAll("button[data-copy]").forEach((button) => {
    button.addEventListener("click", async () => {
      const target = document.getElementById(button.dataset.copy);
      try {
        await navigator.clipboard.writeText(target.textContent);
        button.textContent = "Copied";
      } catch (e) {
        const range = document.createRange();
        range.selectNodeContents(target);
        const selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
        button.textContent = "Selected: press Ctrl+C";
      }
    });
  });
});
