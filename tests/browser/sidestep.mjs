// Drives JupyterLab in Debian's Chromium to compare the jobs panel's step with the dashboard's
// while a job runs.
//
//   node sidestep.mjs BASE_URL NOTEBOOK OUT_DIR
//
// The notebook (written by test_sidebar_browser.py) has two code cells: load the extension, a
// local job reporting a step every quarter second ("sidestep"). With the panel open, the page
// reads the dashboard's header step and the panel row's step in one synchronous pass every
// 250 ms (the same moment for both) until the dashboard says Succeeded, then reads the chart's
// and the rank table's last steps. Prints one JSON object; screenshots in OUT_DIR.

import fs from "node:fs";
import path from "node:path";
import { openBrowser, openNotebook, runCell, runScenario, waitForPrompt } from "./lab.mjs";

const [baseUrl, notebook, outDir] = process.argv.slice(2);
const JOB_TIMEOUT = 240_000;
const NAME = "sidestep";

fs.mkdirSync(outDir, { recursive: true });
const { page, result, close } = await openBrowser({ width: 1440, height: 900 });

await runScenario({ page, result, close }, outDir, async () => {
  await openNotebook(page, `${baseUrl}/lab/tree/${notebook}`);
  await page.locator(".jp-Disttrain-status").click(); // the panel stays open throughout
  await page.locator(".jp-DisttrainPanel").waitFor({ state: "visible", timeout: 30_000 });
  await waitForPrompt(await runCell(page, 0));
  await runCell(page, 1);
  // [ms since the first sample, dashboard step, panel step, dashboard state] every 250 ms
  result.samples = await page.evaluate(
    ({ name, timeout }) =>
      new Promise((resolve, reject) => {
        const samples = [];
        const started = Date.now();
        const number = (text) => {
          const m = /\d+/.exec(text ?? "");
          return m ? Number(m[0]) : null;
        };
        const timer = setInterval(() => {
          const root = document.querySelector(`.distrain-job-${name}`);
          const header = root?.querySelector(".distrain-header");
          const dash = number(root?.querySelector('.distrain-header [data-field="step"]')?.textContent);
          const row = document.querySelector(`.jp-DisttrainPanel tr.jp-Disttrain-job[data-job-id="local/${name}"]`);
          const side = number(row?.querySelector("td.jp-Disttrain-step")?.textContent);
          samples.push([Date.now() - started, dash, side, header?.dataset.state ?? null]);
          if (header?.dataset.state === "Succeeded" || header?.dataset.state === "Failed") {
            clearInterval(timer);
            resolve(samples);
          } else if (Date.now() - started > timeout) {
            clearInterval(timer);
            reject(new Error(`${name} did not end in ${timeout} ms; last ${JSON.stringify(samples.slice(-3))}`));
          }
        }, 250);
      }),
    { name: NAME, timeout: JOB_TIMEOUT },
  );
  // the ended job: its chart's last point and its rank table's steps (the last render done)
  await page.locator(`.jp-DisttrainPanel tr.jp-Disttrain-job[data-job-id="local/${NAME}"][data-state="Succeeded"]`).waitFor({ timeout: 30_000 });
  await page.waitForFunction(
    (name) => {
      const plot = document.querySelector(`.distrain-job-${name} .js-plotly-plot`);
      const xs = (plot?.data ?? []).flatMap((t) => Array.from(t.x ?? []).map(Number));
      const steps = [...document.querySelectorAll(`.distrain-job-${name} tr.distrain-rank-row`)].map((tr) => Number(tr.dataset.step));
      return xs.length > 0 && steps.length > 0 && Math.max(...xs) === Math.max(...steps);
    },
    NAME,
    { timeout: 30_000 },
  ).catch(() => {}); // what they show is asserted by the test, with the job's logs
  result.end = await page.evaluate((name) => {
    const root = document.querySelector(`.distrain-job-${name}`);
    const plot = root?.querySelector(".js-plotly-plot");
    const xs = (plot?.data ?? []).flatMap((t) => Array.from(t.x ?? []).map(Number));
    const row = document.querySelector(`.jp-DisttrainPanel tr.jp-Disttrain-job[data-job-id="local/${name}"]`);
    return {
      state: root?.querySelector(".distrain-header")?.dataset.state ?? null,
      headerStep: root?.querySelector('.distrain-header [data-field="step"]')?.textContent ?? null,
      chartLastX: xs.length ? Math.max(...xs) : null,
      rankSteps: [...(root?.querySelectorAll("tr.distrain-rank-row") ?? [])].map((tr) => Number(tr.dataset.step)),
      sideStep: row?.querySelector("td.jp-Disttrain-step")?.textContent ?? null,
    };
  }, NAME);
  await page.screenshot({ path: path.join(outDir, "sidestep.png") });
});
