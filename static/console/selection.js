// Area browser: "select every message on this page", the selected count, and "all matching" unticks nothing.
"use strict";
(function () {
  const form = document.getElementById("selection");
  const pageBox = document.getElementById("select-page");
  const boxes = () => Array.from(form.querySelectorAll('input[name="ids"]'));
  const count = document.getElementById("selected-count");
  function update() {
    const n = boxes().filter((b) => b.checked).length;
    count.textContent = String(n);
    pageBox.checked = n > 0 && n === boxes().length;
    pageBox.indeterminate = n > 0 && n < boxes().length;
  }
  pageBox.addEventListener("change", () => { for (const b of boxes()) b.checked = pageBox.checked; update(); });
  form.addEventListener("change", (e) => { if (e.target.name === "ids") update(); });
  update();
})();
