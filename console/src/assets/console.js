// The slipway console's only script: a build log that follows its deploy until it finishes, parts of a page that
// keep themselves current, copy buttons, and times worded relative to now (the exact time stays as their title).
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

// Parts of a page marked `data-live` (each with an id) are read again from the page's own address every 5 seconds
// while the page is in view, and swapped in when the server renders them differently. A part with an open
// confirmation or the focus inside waits until it is closed, so nothing a person is doing is lost.
function keepLive() {
  const parts = () => Array.from(document.querySelectorAll("[data-live][id]"));
  const rendered = new Map(parts().map((part) => [part.id, part.innerHTML]));
  if (rendered.size === 0) return;
  async function refresh() {
    if (document.visibilityState === "visible") {
      try {
        const res = await fetch(location.href, { credentials: "same-origin", headers: { accept: "text/html" } });
        if (res.ok) {
          const fresh = new DOMParser().parseFromString(await res.text(), "text/html");
          let swapped = false;
          for (const part of parts()) {
            const next = fresh.getElementById(part.id);
            if (!next || rendered.get(part.id) === next.innerHTML) continue;
            if (part.querySelector("details[open]") || part.contains(document.activeElement)) continue;
            rendered.set(part.id, next.innerHTML);
            part.replaceWith(document.importNode(next, true));
            swapped = true;
          }
          if (swapped) wordTimes();
        }
      } catch (e) {
        // The next round tries again.
      }
    }
    setTimeout(refresh, 5000);
  }
  setTimeout(refresh, 5000);
}

// Copy buttons, found by the click so that parts swapped in by `keepLive` keep theirs.
async function copyFrom(button) {
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
}

document.addEventListener("DOMContentLoaded", () => {
  keepLive();
  wordTimes();
  setInterval(wordTimes, 30000);
  document.querySelectorAll("pre[data-source]").forEach(followLog);
  document.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-copy]");
    if (button) copyFrom(button);
  });
});
