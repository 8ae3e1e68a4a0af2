// A job's live progress: polls the admin API (GET /api/jobs/<id>/) until the job has finished.
"use strict";
(function () {
  const box = document.getElementById("job");
  const bar = document.getElementById("job-progress");
  const count = document.getElementById("job-count");
  const status = document.getElementById("job-status");
  const result = document.getElementById("job-result");
  const CLASSES = { succeeded: "state-on", failed: "state-bad", running: "state-warn", queued: "state-off" };
  async function poll() {
    let job;
    try {
      const response = await fetch(box.dataset.url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (!response.ok) throw new Error("HTTP " + response.status);
      job = await response.json();
    } catch (err) {
      result.textContent = "Progress unavailable (" + err.message + "); retrying…";
      setTimeout(poll, 2000);
      return;
    }
    bar.value = job.progress;
    count.textContent = `${job.done.toLocaleString("en")} of ${job.total.toLocaleString("en")} messages`;
    const label = document.createElement("span");
    label.className = "state " + (CLASSES[job.status] || "state-off");
    label.textContent = job.status;
    status.replaceChildren(label);
    box.dataset.status = job.status;
    if (job.status === "succeeded") {
      result.textContent = `Done: ${job.done.toLocaleString("en")} message${job.done === 1 ? "" : "s"} ${job.kind}d.`;
    } else if (job.status === "failed") {
      const e = document.createElement("span");
      e.className = "error";
      e.textContent = job.error;
      result.replaceChildren(e);
    } else {
      setTimeout(poll, 500);
    }
  }
  if (box.dataset.status === "queued" || box.dataset.status === "running") poll();
})();
