// Drives JupyterLab in Debian's Chromium over a 1,024-node dashboard (8,192 ranks).
//
//   node scale.mjs BASE_URL NOTEBOOK OUT_DIR [PICKS]
//
// Cell 1 builds the job's monitor in the kernel and shows its dashboard; the
// script reads the summarised rank table, types ranks into the picker, then
// runs cell 2 (reports for 25 s) while timing each chart redraw from
// plotly's own events (plotly_beforeplot to plotly_afterplot). PICKS are the
// ranks typed into the picker ("42, 4100-4101" unless given: a rank, then a
// range of two). Prints one JSON object; saves scale-dashboard.png in OUT_DIR.

import fs from "node:fs";
import path from "node:path";
import { openBrowser, openNotebook, runCell, runScenario, waitForPrompt } from "./lab.mjs";

const [baseUrl, notebook, outDir, picks = "42, 4100-4101"] = process.argv.slice(2);
// the range's two ranks: the last opens as a row, the first as a line in the legend
const [rangeFirst, rangeLast] = picks.split(",")[1].trim().split("-");
const dash = ".distrain-job-scale";

fs.mkdirSync(outDir, { recursive: true });
const { page, result, close } = await openBrowser({ width: 1400, height: 2200 });

await runScenario({ page, result, close }, outDir, async () => {
  await openNotebook(page, `${baseUrl}/lab/tree/${notebook}`);

  await waitForPrompt(await runCell(page, 0));
  await page.locator(`${dash} .distrain-rank-summary`).waitFor({ timeout: 120_000 });
  await page.locator(`${dash} .js-plotly-plot .scatterlayer .trace`).first().waitFor({ timeout: 120_000 });

  // open ranks on demand
  const box = page.locator(`${dash} .distrain-rank-picker input`);
  await box.fill(picks);
  await box.press("Enter");
  await page.locator(`${dash} tr.distrain-opened[data-rank="${rangeLast}"]`).waitFor({ timeout: 60_000 });
  await page.waitForFunction(
    ([sel, name]) => [...document.querySelectorAll(`${sel} .legendtext`)].some((t) => t.textContent === name),
    [dash, `rank ${rangeFirst}`],
    { timeout: 60_000 },
  );
  result.picked = await page
    .locator(`${dash} tr.distrain-opened`)
    .evaluateAll((trs) => trs.map((tr) => Number(tr.dataset.rank)));

  // time the chart's redraws while the kernel reports a step a second
  await page.locator(`${dash} .js-plotly-plot`).evaluate((gd) => {
    window.__redraws = [];
    let start = null;
    gd.on("plotly_beforeplot", () => {
      start = performance.now();
    });
    gd.on("plotly_afterplot", () => {
      if (start !== null) window.__redraws.push(performance.now() - start);
      start = null;
    });
  });
  const feed = await runCell(page, 1);
  // read the dashboard while the ranks report (a stopped feed reads as stalled after seconds)
  await page.waitForFunction(() => window.__redraws.length >= 3, null, { timeout: 120_000 });
  result.counts = await page
    .locator(`${dash} .distrain-state-count`)
    .evaluateAll((els) => els.map((e) => ({ state: e.dataset.state, count: e.dataset.count })));
  result.ranges = await page.locator(`${dash} .distrain-state-range`).allTextContents();
  result.rows = await page
    .locator(`${dash} tr.distrain-rank-row:not(.distrain-opened)`)
    .evaluateAll((trs) => trs.map((tr) => Number(tr.dataset.rank)));
  result.diagnosis = (await page.locator(`${dash} .distrain-diagnosis`).allTextContents()).join(" ");
  // the legend as drawn: a redraw under way can have removed it and not yet drawn it again
  const legend = await page.waitForFunction(
    (sel) => {
      const names = [...document.querySelectorAll(`${sel} .legendtext`)].map((e) => e.textContent);
      return names.length ? names : null;
    },
    dash,
    { timeout: 30_000 },
  );
  result.traces = await legend.jsonValue();
  await page.locator(dash).screenshot({ path: path.join(outDir, "scale-dashboard.png") });
  await feed.locator(".jp-OutputArea-output").getByText("fed").waitFor({ timeout: 120_000 });
  await waitForPrompt(feed);
  result.redraws = await page.evaluate(() => window.__redraws);
}, async () => {
  // what the chart's element holds, to tell a figure never sent from one never drawn
  result.chart = await page.locator(`${dash} .js-plotly-plot`).evaluateAll((gds) =>
    gds.map((gd) => ({
      traces: (gd.data ?? []).length,
      title: gd.layout?.title?.text ?? null,
      appends: gd.dataset.distrainAppends ?? null,
      classes: gd.className,
    })),
  );
});
