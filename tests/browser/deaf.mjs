// Drives JupyterLab in Debian's Chromium through a chart model whose front end overran
// anywidget's initialization budget (a page short of CPU): anywidget then drops every message
// to that model. The page cuts the first anywidget model's 2 s budget to 0 ms (before the page
// loads), then runs the notebook's cells (load the extension, a 1x2 job reporting 60 steps),
// waits for the dashboard's Succeeded and its chart's last step (up to 90 s after it), cuts
// the next model's budget (the checkpoint table's), shows the job's checkpoints, clicks the
// table's step header and waits for ascending rows (up to 90 s), and runs the last cell (it
// prints the new comms of each chart and table).
//
//   node deaf.mjs BASE_URL NOTEBOOK OUT_DIR
//
// Prints one JSON object: the budgets cut, the chart's last x, its traces and held messages,
// the table's rows and header, the last cell's output and the page's console errors; a
// screenshot in OUT_DIR.

import fs from "node:fs";
import path from "node:path";
import { openBrowser, openNotebook, runCell, runScenario, waitForPrompt } from "./lab.mjs";

const [baseUrl, notebook, outDir] = process.argv.slice(2);
const CHART_WAIT = 90_000;

fs.mkdirSync(outDir, { recursive: true });
const { page, result, close } = await openBrowser({ width: 1440, height: 900 });

await runScenario({ page, result, close }, outDir, async () => {
  await page.addInitScript(() => {
    const timeout = AbortSignal.timeout.bind(AbortSignal);
    window.distrainBudgets = { cut: 0, kept: 0 };
    AbortSignal.timeout = (ms) => {
      const anywidget = ms === 2000 && (new Error().stack ?? "").includes("anywidget");
      if (anywidget && (window.distrainBudgets.cut === 0 || window.distrainCutNext)) {
        window.distrainCutNext = false;
        window.distrainBudgets.cut += 1;
        return timeout(0);
      }
      if (anywidget) window.distrainBudgets.kept += 1;
      return timeout(ms);
    };
  });
  await openNotebook(page, `${baseUrl}/lab/tree/${notebook}`);
  await waitForPrompt(await runCell(page, 0));
  await runCell(page, 1);
  await page.locator('.distrain-header[data-state="Succeeded"]').waitFor({ timeout: 240_000 });
  const started = Date.now();
  const chart = () =>
    page.evaluate(() => {
      const plot = document.querySelector(".distrain-plot.js-plotly-plot");
      const xs = (plot?.data ?? []).flatMap((t) => Array.from(t.x ?? []).map(Number));
      return {
        lastX: xs.length ? Math.max(...xs) : null,
        traces: (plot?.data ?? []).length,
        held: plot?.dataset.distrainHeld ?? null,
        plots: document.querySelectorAll(".distrain-plot").length,
      };
    });
  let seen = await chart();
  while (seen.lastX !== 59 && Date.now() - started < CHART_WAIT) {
    await page.waitForTimeout(500);
    seen = await chart();
  }
  result.chart = seen;
  result.chartWaited = (Date.now() - started) / 1000;
  await page.screenshot({ path: path.join(outDir, "recovered.png") });
  // the checkpoint table's model overruns its budget too; its step header is clicked at once
  await page.evaluate(() => { window.distrainCutNext = true; });
  await runCell(page, 2);
  const header = page.locator(".distrain-ckpt-table th[data-col=step]");
  await header.click({ timeout: 60_000 });
  const table = () =>
    page.evaluate(() => ({
      steps: [...document.querySelectorAll(".distrain-ckpt-table tbody tr")].map((tr) => Number(tr.dataset.step)),
      header: document.querySelector(".distrain-ckpt-table th[data-col=step]")?.textContent ?? null,
    }));
  const clicked = Date.now();
  let rows = await table();
  while (rows.steps.join() !== "0,20,40" && Date.now() - clicked < CHART_WAIT) {
    await page.waitForTimeout(500);
    rows = await table();
  }
  result.table = { ...rows, waited: (Date.now() - clicked) / 1000 };
  result.budgets = await page.evaluate(() => window.distrainBudgets);
  const last = await runCell(page, 3);
  await waitForPrompt(last);
  result.reopens = (await last.locator(".jp-OutputArea-output").last().innerText()).trim();
});
