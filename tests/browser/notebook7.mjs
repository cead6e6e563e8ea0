// Drives Notebook 7 in Debian's Chromium to check the dashboard and the checkpoint browser.
//
//   node notebook7.mjs BASE_URL NOTEBOOK OUT_DIR
//
// The notebook (written by test_notebook7_browser.py) has three code cells:
// load the extension, a 1x2 job ("nb7-train") that reports a loss and saves a
// checkpoint every 10 steps, `%distrain_checkpoints nb7-train`. The script
// samples the job's plotly curve while it runs (its points must grow), opens
// the checkpoint browser mid-run, refreshes it after the job ended, selects
// a row, saves screenshots in OUT_DIR and prints one JSON object of what it
// saw. Exit code 1 (with {"error": ...}) when a step times out.

import fs from "node:fs";
import path from "node:path";
import { openBrowser, runCell as runCellOn, waitForPrompt } from "./lab.mjs";

const [baseUrl, notebook, outDir] = process.argv.slice(2);
const JOB = ".distrain-job-nb7-train";
const BROWSER = ".distrain-ckpt-browser";
const JOB_TIMEOUT = 180_000;

fs.mkdirSync(outDir, { recursive: true });
const { page, result, close } = await openBrowser({ width: 1300, height: 1600 });
const runCell = (index) => runCellOn(page, index);

// Points per trace of the job's loss plot, as plotly holds them in its graph div.
async function points() {
  return page.evaluate(
    (sel) => (document.querySelector(`${sel} .js-plotly-plot`)?.data ?? []).map((t) => t.x?.length ?? 0),
    JOB,
  );
}

async function headerState() {
  return page.locator(`${JOB} .distrain-header`).getAttribute("data-state");
}

async function checkpointRows() {
  return page.locator(`${BROWSER} .distrain-ckpt-table tbody tr`).evaluateAll((trs) =>
    trs.map((tr) => ({ step: Number(tr.dataset.step), status: tr.dataset.status })),
  );
}

try {
  await page.goto(`${baseUrl}/notebooks/${notebook}`, { waitUntil: "domcontentloaded" });
  await page.locator(".jp-Notebook .jp-Cell").first().waitFor({ timeout: 60_000 });
  result.app = await page.evaluate(() => document.body.dataset.notebook ?? "");
  result.title = await page.title();

  // 1: load the extension; 2: the job, its dashboard watched while it runs
  await waitForPrompt(await runCell(0));
  await runCell(1);
  await page.locator(`${JOB} .distrain-header`).waitFor({ timeout: 60_000 });
  await page.locator(`${JOB} .distrain-header[data-state="Running"]`).waitFor({ timeout: JOB_TIMEOUT });
  // the curve while it grows: one sample per second until the job ends
  const samples = [];
  const started = Date.now();
  for (;;) {
    const state = await headerState();
    const counts = await points();
    const step = await page
      .locator(`${JOB} tr.distrain-rank-row[data-rank="0"]`)
      .getAttribute("data-step")
      .catch(() => null);
    samples.push({ state, step, points: counts });
    if (state !== "Running" && state !== "Pending") break;
    if (Date.now() - started > JOB_TIMEOUT) throw new Error(`the job is still ${state}`);
    if (!result.checkpointsMidRun && Number(step) >= 25) {
      // 3: the checkpoint browser, opened while the job still runs
      await runCell(2);
      await page.locator(`${BROWSER} .distrain-ckpt-table tbody tr`).first().waitFor({ timeout: 60_000 });
      result.checkpointsMidRun = await checkpointRows();
      await page.locator(BROWSER).screenshot({ path: path.join(outDir, "notebook7-checkpoints-midrun.png") });
    }
    await page.waitForTimeout(500);
  }
  result.samples = samples;
  await page.locator(`${JOB} .distrain-header[data-state="Succeeded"]`).waitFor({ timeout: 30_000 });
  await page.waitForTimeout(1500); // the final render
  result.final = { state: await headerState(), points: await points() };
  await page.locator(JOB).screenshot({ path: path.join(outDir, "notebook7-dashboard.png") });

  // the checkpoint browser: Refresh shows what the job wrote since, a row shows its detail
  const before = (await checkpointRows()).length;
  await page.locator(`${BROWSER} button`, { hasText: "Refresh" }).click();
  await page.waitForFunction(
    ({ sel, before }) => document.querySelectorAll(`${sel} .distrain-ckpt-table tbody tr`).length > before,
    { sel: BROWSER, before },
    { timeout: 30_000 },
  );
  result.checkpointsAfter = await checkpointRows();
  await page.locator(`${BROWSER} .distrain-ckpt-table tbody tr[data-step="20"]`).click();
  await page.locator(`${BROWSER} .distrain-ckpt-detail`).filter({ hasText: "step 20" }).waitFor({ timeout: 30_000 });
  result.detail = await page.locator(`${BROWSER} .distrain-ckpt-detail`).textContent();
  await page.locator(BROWSER).screenshot({ path: path.join(outDir, "notebook7-checkpoints.png") });
  await page.screenshot({ path: path.join(outDir, "notebook7.png"), fullPage: true });
} catch (err) {
  result.error = String(err?.stack ?? err);
  await page.screenshot({ path: path.join(outDir, "failure.png") }).catch(() => {});
} finally {
  await close();
}

process.stdout.write(JSON.stringify(result) + "\n");
process.exit(result.error ? 1 : 0);
