// Progressive enhancement only: every page works without this file.
// A copy button beside each command; the command stays selectable text without it.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  if (!navigator.clipboard) return;
  for (const code of document.querySelectorAll("code.cmd")) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "copy";
    button.textContent = "Copy";
    button.setAttribute("aria-label", "Copy: " + code.textContent);
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(code.textContent);
        button.textContent = "Copied";
      } catch {
        button.textContent = "Select and copy";
      }
    });
    code.after(" ", button);
  }
});

// A running crawl's page reloads itself while the crawl runs.
document.addEventListener("DOMContentLoaded", () => {
  const live = document.querySelector("[data-refresh]");
  if (live) setTimeout(() => location.reload(), 1000 * Number(live.dataset.refresh));
});
