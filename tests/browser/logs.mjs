// Drives JupyterLab or Notebook 7 in Debian's Chromium: "Show logs" of a failed job.
//
//   LOGS_APP=lab|notebook LOGS_JOB=ID node logs.mjs BASE_URL NOTEBOOK OUT_DIR
//
// The notebook (written by test_logs_browser.py) has two code cells: load the
// extension, a job whose rank 1 raises. The script runs both, waits for the
// job's failure notification, clicks its "Show logs" and reads the log viewer
// of job LOGS_JOB (``backend/name``) once it first shows text. Saves a
// screenshot in OUT_DIR and prints one JSON object of what it saw. Exit code 1
// (with {"error": ...}) when a step times out.

import fs from "node:fs";
import path from "node:path";
import { openBrowser, openNotebook, runCell as runCellOn, runScenario, waitForPrompt } from "./lab.mjs";

const [baseUrl, notebook, outDir] = process.argv.slice(2);
const app = process.env.LOGS_APP ?? "lab";
const jobId = process.env.LOGS_JOB;
const JOB_TIMEOUT = 240_000;

fs.mkdirSync(outDir, { recursive: true });
const { page, result, close } = await openBrowser({ width: 1400, height: 900 });
const runCell = (index) => runCellOn(page, index);
const name = jobId.split("/").slice(1).join("/");

await runScenario({ page, result, close }, outDir, async () => {
  const where = app === "lab" ? `lab/tree/${notebook}` : `notebooks/${notebook}`;
  await openNotebook(page, `${baseUrl}/${where}`);
  await waitForPrompt(await runCell(0));
  await runCell(1);

  const toast = page.locator(".Toastify__toast").filter({ hasText: `Training job ${name} failed` });
  await toast.waitFor({ timeout: JOB_TIMEOUT });
  result.toast = await toast.evaluate((el) => el.querySelector(".jp-toast-message")?.textContent ?? el.textContent);
  await toast.getByRole("button", { name: "Show logs" }).click();

  const viewer = page.locator(`.jp-DisttrainLogs[data-job-id="${jobId}"]`);
  await viewer.waitFor({ timeout: 30_000 });
  // the first read of a finished job's logs is all it shows (no re-reads once it ended)
  const text = viewer.locator(".jp-DisttrainLogs-text");
  await page.waitForFunction((el) => el.textContent.trim() !== "", await text.elementHandle(), {
    timeout: 60_000,
  });
  result.logs = await text.textContent();
  result.status = await viewer.locator(".jp-DisttrainLogs-status").textContent();
  result.visible = await viewer.isVisible();
  await page.screenshot({ path: path.join(outDir, `logs-${app}.png`) });
});
