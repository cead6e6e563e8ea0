// Drives JupyterLab in Debian's Chromium to check the job dashboard from the DOM.
//
//   node dashboard.mjs BASE_URL NOTEBOOK OUT_DIR
//
// The notebook (written by test_dashboard_browser.py) has three code cells:
// load the extension, a short 2x2 job ("browser-ok"), a long job
// ("browser-stop"). Cells run one at a time; the script reads the dashboards'
// DOM (class names and data-* attributes), clicks the second job's Stop
// button, saves screenshots in OUT_DIR and prints one JSON object of what it
// saw. Exit code 1 (with {"error": ...}) when a step times out.

import fs from "node:fs";
import path from "node:path";
import { openBrowser, runCell as runCellOn, waitForPrompt, runScenario } from "./lab.mjs";

const [baseUrl, notebook, outDir] = process.argv.slice(2);
const JOB_TIMEOUT = 180_000;

fs.mkdirSync(outDir, { recursive: true });
const { page, result, close } = await openBrowser({ width: 1400, height: 1800 });

const dash = (job) => `.distrain-job-${job}`;

const runCell = (index) => runCellOn(page, index);

async function headerState(job) {
  return page.locator(`${dash(job)} .distrain-header`).getAttribute("data-state");
}

async function rows(job) {
  return page.locator(`${dash(job)} tr.distrain-rank-row`).evaluateAll((trs) =>
    trs.map((tr) => ({
      rank: Number(tr.dataset.rank),
      state: tr.dataset.state,
      step: tr.dataset.step,
      host: tr.querySelector('td[data-col="host"]')?.textContent ?? "",
      classes: [...tr.classList],
    })),
  );
}

async function plot(job) {
  return page.locator(`${dash(job)} .scatterlayer .trace`).evaluateAll((traces) =>
    traces.map((trace) => {
      const d = trace.querySelector("path.js-line")?.getAttribute("d") ?? "";
      return { points: d ? d.split(/[ML]/).filter((s) => s.trim()).length : 0 };
    }),
  );
}

async function logLines(job) {
  return page.locator(`${dash(job)} .distrain-log-line`).evaluateAll((lines) =>
    lines.map((line) => ({
      ranks: line.dataset.ranks,
      label: line.querySelector(".distrain-log-rank")?.textContent ?? "",
      text: line.textContent,
    })),
  );
}

await runScenario({ page, result, close }, outDir, async () => {
  await page.goto(`${baseUrl}/lab/tree/${notebook}`, { waitUntil: "domcontentloaded" });
  await page.locator(".jp-Notebook .jp-Cell").first().waitFor({ timeout: 60_000 });
  // the kernel is connected once the status bar says "... | Idle"
  await page.locator("#jp-main-statusbar").getByText(/\| Idle/).waitFor({ timeout: 60_000 });

  // 1: load the extension
  await waitForPrompt(await runCell(0));

  // 2: a short 2x2 job, run to the end
  const okCell = await runCell(1);
  await page.locator(`${dash("browser-ok")} .distrain-header`).waitFor({ timeout: 60_000 });
  await page
    .locator(`${dash("browser-ok")} .distrain-header[data-state="Succeeded"]`)
    .waitFor({ timeout: JOB_TIMEOUT });
  await page.waitForFunction(
    (sel) => {
      const rows = document.querySelectorAll(`${sel} tr.distrain-rank-row[data-state="Succeeded"]`);
      const lines = document.querySelectorAll(`${sel} .scatterlayer .trace path.js-line`);
      return rows.length === 4 && lines.length > 0;
    },
    dash("browser-ok"),
    { timeout: 30_000 },
  );
  await page.waitForTimeout(1000); // the final render and static snapshot
  await waitForPrompt(okCell);
  result.ok = {
    state: await headerState("browser-ok"),
    rows: await rows("browser-ok"),
    traces: await plot("browser-ok"),
    logs: await logLines("browser-ok"),
    comms: await page.locator(`${dash("browser-ok")} .distrain-comms`).getAttribute("data-backend"),
  };
  await page.locator(dash("browser-ok")).screenshot({ path: path.join(outDir, "dashboard-succeeded.png") });

  // 3: a long job, stopped from its dashboard
  await runCell(2);
  await page
    .locator(`${dash("browser-stop")} tr.distrain-rank-row[data-state="Running"]`)
    .first()
    .waitFor({ timeout: JOB_TIMEOUT });
  await page.waitForFunction(
    (sel) => [...document.querySelectorAll(`${sel} tr.distrain-rank-row`)].some((tr) => Number(tr.dataset.step) >= 3),
    dash("browser-stop"),
    { timeout: 60_000 },
  );
  result.beforeStop = {
    state: await headerState("browser-stop"),
    rows: await rows("browser-stop"),
    plot: await page
      .locator(`${dash("browser-stop")} .distrain-plot`)
      .evaluate((el) => ({ ...el.dataset })),
  };
  const stop = page.locator(`${dash("browser-stop")} button.distrain-stop`);
  result.stopEnabled = await stop.isEnabled();
  const clicked = Date.now();
  await stop.click();
  await page
    .locator(`${dash("browser-stop")} .distrain-header[data-state="Stopped"]`)
    .waitFor({ timeout: 60_000 });
  result.stopSeconds = (Date.now() - clicked) / 1000;
  await page.waitForTimeout(1000);
  result.stopped = {
    state: await headerState("browser-stop"),
    rows: await rows("browser-stop"),
    stopEnabled: await stop.isEnabled(),
  };
  await page.locator(dash("browser-stop")).screenshot({ path: path.join(outDir, "dashboard-stopped.png") });
  await page.screenshot({ path: path.join(outDir, "jupyterlab.png") });
});
