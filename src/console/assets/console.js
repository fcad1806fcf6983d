// The slipway console's only script: a build log that follows its deploy until it finishes, and copy buttons.
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
        if (window.status !== status) {
          status = window.status;
          pre.dataset.status = status;
          if (statusEl) {
            statusEl.textContent = status;
            statusEl.className = "status status-" + status;
          }
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

document.addEventListener("DOMContentLoaded", () => {
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
