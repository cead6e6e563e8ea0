// Drives JupyterLab in Debian's Chromium to read the dashboard of a Lightning job (autolog).
//
//   node autolog.mjs BASE_URL NOTEBOOK OUT_DIR
//
// The notebook (written by test_autolog_browser.py) has two code cells: load the
// extension, a 2x2 Lightning job ("browser-pl") whose module only calls self.log.
// The script waits for the job to succeed, reads its plot, rows and progress from
// the DOM, saves a screenshot of the dashboard in OUT_DIR and prints one JSON object.

import fs from "node:fs";
import path from "node:path";
import { openBrowser, openNotebook, runCell as runCellOn, runScenario, waitForPrompt } from "./lab.mjs";

const [baseUrl, notebook, outDir] = process.argv.slice(2);
const JOB = ".distrain-job-browser-pl";

fs.mkdirSync(outDir, { recursive: true });
const { page, result, close } = await openBrowser({ width: 1400, height: 1800 });

await runScenario({ page, result, close }, outDir, async () => {
  await openNotebook(page, `${baseUrl}/lab/tree/${notebook}`);
  await waitForPrompt(await runCellOn(page, 0));
  const cell = await runCellOn(page, 1);
  await page.locator(`${JOB} .distrain-header[data-state="Succeeded"]`).waitFor({ timeout: 240_000 });
  await page.waitForFunction(
    (sel) => document.querySelectorAll(`${sel} .scatterlayer .trace path.js-line`).length > 0,
    JOB,
    { timeout: 30_000 },
  );
  await page.waitForTimeout(1000); // the final render
  await waitForPrompt(cell);
  result.rows = await page.locator(`${JOB} tr.distrain-rank-row`).evaluateAll((trs) =>
    trs.map((tr) => ({ rank: Number(tr.dataset.rank), state: tr.dataset.state, step: tr.dataset.step })),
  );
  result.traces = await page.locator(`${JOB} .scatterlayer .trace`).evaluateAll((traces) =>
    traces.map((trace) => {
      const d = trace.querySelector("path.js-line")?.getAttribute("d") ?? "";
      return { points: d ? d.split(/[ML]/).filter((s) => s.trim()).length : 0 };
    }),
  );
  result.text = await page.locator(JOB).innerText();
  await page.locator(JOB).screenshot({ path: path.join(outDir, "lightning-job.png") });
});
