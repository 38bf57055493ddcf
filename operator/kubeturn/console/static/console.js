// Draws each Run machine's mermaid text into its diagram, on load and whenever htmx swaps
// a live part in; the drawn SVG's nodes carry the classes active and visited.
(function () {
  let drawn = 0;
  async function draw(root) {
    if (typeof mermaid === "undefined") return;
    for (const source of root.querySelectorAll("pre.machine-source")) {
      const target = source.nextElementSibling;
      drawn += 1;
      try {
        const { svg } = await mermaid.render("machine-" + drawn, source.textContent);
        target.innerHTML = svg;
        target.dataset.drawn = "true";
      } catch (error) {
        target.textContent = "The machine cannot be drawn: " + error;
      }
    }
  }
  if (typeof mermaid !== "undefined") {
    mermaid.initialize({ startOnLoad: false, securityLevel: "strict", theme: "default" });
  }
  document.addEventListener("DOMContentLoaded", () => draw(document));
  document.addEventListener("htmx:afterSwap", (event) => draw(event.detail.elt));
})();
