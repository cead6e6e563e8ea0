// Drives Notebook 7 in Debian's Chromium to check the dashboard and the checkpoint browser.
//
//   node notebook7.mjs BASE_URL NOTEBOOK OUT_DIR
//
// The notebook (written by test_notebook7_browser.py) has three code cells:
// load the extension, a 1x2 job ("nb7-train") that reports a loss and saves a
// checkpoint every 10 steps until a file "stop-training" appears in the
// server root, `%distrain_checkpoints nb7-train`. The script samples the
// job's plotly curve while it runs (its points must grow), opens the
// checkpoint browser mid-run, lets the job finish (creates the file), then
// sees the job's end notification and opens its logs from it, refreshes the
// checkpoint browser and selects a row; it saves screenshots in OUT_DIR
// and prints one JSON object of what it saw. Exit code 1 (with {"error": ...}) when a step times out.

import fs from "node:fs";
import path from "node:path";
import { openBrowser, openNotebook, replaced, runCell as runCellOn, runScenario, waitForPrompt, watchReplacement } from "./lab.mjs";
import { resumeBelow } from "./resume.mjs";

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

async function rank0Step() {
  return page.evaluate((sel) => document.querySelector(`${sel} tr.distrain-rank-row[data-rank="0"]`)?.dataset.step ?? null, JOB);
}

async function waitForStep(step) {
  await page.waitForFunction(
    ({ sel, step }) => Number(document.querySelector(`${sel} tr.distrain-rank-row[data-rank="0"]`)?.dataset.step) >= step,
    { sel: JOB, step },
    { timeout: JOB_TIMEOUT },
  );
}

// Creates an empty file at the server root through its contents API (as the page would).
async function createFile(name) {
  return page.evaluate(async (name) => {
    const xsrf = document.cookie.match(/_xsrf=([^;]+)/)?.[1] ?? "";
    const reply = await fetch(`/api/contents/${name}`, {
      method: "PUT",
      headers: { "Content-Type": "application/json", "X-XSRFToken": decodeURIComponent(xsrf) },
      body: JSON.stringify({ type: "file", format: "text", content: "" }),
    });
    return reply.status;
  }, name);
}

// The checkpoint table's rows, once it shows some, read in one step. The table can be absent
// for a moment after it was shown: a page short of CPU that took over anywidget's budget to
// start its model hears nothing on it, the kernel opens a new comm (widgets/reopen.py), and the
// browser's box removes the old view at once and makes the new one when its module loaded.
async function checkpointRows() {
  const rows = await page.waitForFunction(
    (sel) => {
      const trs = [...document.querySelectorAll(`${sel} .distrain-ckpt-table tbody tr`)];
      const read = trs.map((tr) => ({ step: Number(tr.dataset.step), status: tr.dataset.status }));
      return read.length > 0 ? read : null;
    },
    BROWSER,
    { timeout: 60_000 },
  );
  return rows.jsonValue();
}

await runScenario({ page, result, close }, outDir, async () => {
  await openNotebook(page, `${baseUrl}/notebooks/${notebook}`);
  result.app = await page.evaluate(() => document.body.dataset.notebook ?? "");
  result.title = await page.title();

  // 1: load the extension; 2: the job, its dashboard watched while it runs
  await waitForPrompt(await runCell(0));
  await runCell(1);
  await page.locator(`${JOB} .distrain-header`).waitFor({ timeout: 60_000 });
  await page.locator(`${JOB} .distrain-header[data-state="Running"]`).waitFor({ timeout: JOB_TIMEOUT });
  await watchReplacement(page, JOB.slice(1)); // the job ends only when the test says so
  // the curve while it grows, from its first drawing (plotly's bundle may load after the first
  // steps): samples until three show more points than the one before
  await page.waitForFunction(
    (sel) => (document.querySelector(`${sel} .js-plotly-plot`)?.data ?? []).length >= 3,
    JOB,
    { timeout: JOB_TIMEOUT },
  );
  const samples = [];
  const grown = () => samples.filter((s, i) => i > 0 && s.points[0] > samples[i - 1].points[0]).length;
  const deadline = Date.now() + JOB_TIMEOUT;
  while (grown() < 3) {
    if (Date.now() > deadline) throw new Error(`the curve did not grow: ${JSON.stringify(samples)}`);
    samples.push({ state: await headerState(), step: await rank0Step(), points: await points() });
    await page.waitForTimeout(700);
  }
  result.samples = samples;

  // 3: the checkpoint browser, opened while the job still runs
  await waitForStep(25);
  await runCell(2);
  result.checkpointsMidRun = await checkpointRows();
  result.stateMidRun = await headerState();
  // the table still grows while the job runs (a new checkpoint every few steps): an element
  // screenshot, or Playwright's own scrolling, would wait for it to stand still (on a loaded
  // machine it may not for seconds), so it is scrolled to in the page and shot where it is now
  await page.locator(BROWSER).evaluate((el) => el.scrollIntoView({ block: "nearest" }));
  const midRunBox = await page.locator(BROWSER).boundingBox();
  await page.screenshot({
    path: path.join(outDir, "notebook7-checkpoints-midrun.png"),
    ...(midRunBox ? { clip: midRunBox } : {}),
  });

  // two more checkpoints, then the job is told to finish (it ends when the file exists)
  await waitForStep(Math.max(...result.checkpointsMidRun.map((r) => r.step)) + 25);
  result.gate = await createFile("stop-training");
  await page.locator(`${JOB} .distrain-header[data-state="Succeeded"]`).waitFor({ timeout: 60_000 });
  await replaced(page, JOB.slice(1)); // the final display, which the screenshot below shows
  result.replacements = await page.evaluate((cls) => window.distrainReplaced[cls], JOB.slice(1));
  // the final render: every trace holds as many points as its rank's steps (the mean as the
  // furthest rank's), as the test asserts; what it holds after 30 s is asserted either way
  await page.waitForFunction(
    (sel) => {
      const steps = [...document.querySelectorAll(`${sel} tr.distrain-rank-row`)].map((tr) => Number(tr.dataset.step));
      const counts = (document.querySelector(`${sel} .js-plotly-plot`)?.data ?? []).map((t) => t.x?.length ?? 0);
      const want = [...steps, Math.max(...steps)].map((step) => step + 1).sort((a, b) => a - b);
      return steps.length > 0 && JSON.stringify([...counts].sort((a, b) => a - b)) === JSON.stringify(want);
    },
    JOB,
    { timeout: 30_000 },
  ).catch(() => {});
  result.final = {
    state: await headerState(),
    steps: await page.locator(`${JOB} tr.distrain-rank-row`).evaluateAll((trs) => trs.map((tr) => Number(tr.dataset.step))),
    points: await points(),
  };
  await page.locator(JOB).screenshot({ path: path.join(outDir, "notebook7-dashboard.png") });

  // the lab extension works here too: the job's end as a notification; its logs open below
  const toast = page.locator(".Toastify__toast").filter({ hasText: "Training job nb7-train" });
  await toast.waitFor({ timeout: 60_000 });
  result.toast = await toast.evaluate((el) => ({
    text: el.querySelector(".jp-toast-message")?.textContent ?? el.textContent,
    buttons: [...el.querySelectorAll("button")].map((b) => b.textContent.trim()).filter(Boolean),
  }));
  await toast.getByRole("button", { name: "Show logs" }).click();
  const logs = page.locator('.jp-DisttrainLogs[data-job-id="local/nb7-train"][data-rank="all"]');
  await logs.waitFor({ timeout: 30_000 });
  result.logs = {
    visible: await logs.isVisible(),
    notebookVisible: await page.locator(".jp-NotebookPanel").first().isVisible(),
    area: await logs.evaluate((el) => el.closest("#jp-down-stack") !== null),
  };
  await page.waitForTimeout(500); // the toast's slide out
  await page.screenshot({ path: path.join(outDir, "notebook7-logs.png") });

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
  // Resume: its cell right below the browser's, selected, at once
  result.resume = await resumeBelow(page, BROWSER, 20);
  await page.screenshot({ path: path.join(outDir, "notebook7.png"), fullPage: true });
});
