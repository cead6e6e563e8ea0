// Drives JupyterLab in Debian's Chromium (1440x900, sidebar open) through a failing and a
// hung job, and reads what their dashboards, the sidebar and the status bar say.
//
//   node cause.mjs BASE_URL NOTEBOOK OUT_DIR
//
// The notebook (written by test_cause_browser.py) has three code cells: load the
// extension, a 2x2 job where rank 1 raises among lost gloo connections ("cause-fail"),
// and a job whose rank 1 sleeps inside the loop ("cause-hang", --hang-after 3). The hung
// job is stopped from its dashboard. Prints one JSON object; screenshots in OUT_DIR.

import fs from "node:fs";
import path from "node:path";
import { openBrowser, runCell as runCellOn, waitForPrompt, runScenario } from "./lab.mjs";

const [baseUrl, notebook, outDir] = process.argv.slice(2);
const JOB_TIMEOUT = 180_000;
const VIEW = { width: 1440, height: 900 };

fs.mkdirSync(outDir, { recursive: true });
const { page, result, close } = await openBrowser(VIEW);
const dash = (job) => `.distrain-job-${job}`;

async function seen(job) {
  const sel = dash(job);
  return page.evaluate(
    ({ sel, view }) => {
      const root = document.querySelector(sel);
      root?.querySelector(".distrain-header")?.scrollIntoView({ block: "center" });
      const text = (q) => root?.querySelector(q)?.textContent ?? null;
      const stop = root?.querySelector("button.distrain-stop");
      const box = stop && stop.offsetParent !== null ? stop.getBoundingClientRect() : null;
      const bg = root?.querySelector(".distrain-plot .main-svg");
      const tick = root?.querySelector(".distrain-plot .xtick text");
      const probe = document.createElement("span");
      probe.style.color = "var(--jp-ui-font-color1)";
      document.body.appendChild(probe);
      const ink = getComputedStyle(probe).color;
      probe.remove();
      return {
        state: root?.querySelector(".distrain-header")?.dataset.state ?? null,
        cause: text('.distrain-reason[data-field="cause"]'),
        diagnosis: text(".distrain-diagnosis"),
        traceback: text(".distrain-cause-traceback pre"),
        rate: text('[data-field="rate"]'),
        rows: [...(root?.querySelectorAll("tr.distrain-rank-row") ?? [])].map((tr) => tr.dataset.state),
        stop: box && { left: box.left, right: box.right, top: box.top, bottom: box.bottom },
        stopVisible: Boolean(box),
        plotBackground: bg ? getComputedStyle(bg).backgroundColor : null,
        plotInk: tick ? getComputedStyle(tick).fill : null,
        themeInk: ink,
        hscroll: [...document.querySelectorAll(".jp-Notebook, .jp-DisttrainPanel")].some(
          (el) => el.scrollWidth > el.clientWidth + 1,
        ),
        view,
      };
    },
    { sel, view: VIEW },
  );
}

// The sidebar row of job `id` once the sidebar's polls show it in `state`.
async function sidebarRow(id, state) {
  const row = page.locator(`.jp-DisttrainPanel tr.jp-Disttrain-job[data-job-id="${id}"][data-state="${state}"]`);
  await row.waitFor({ timeout: 30_000 });
  return row.evaluate((tr) => ({ state: tr.dataset.state, title: tr.title }));
}

await runScenario({ page, result, close }, outDir, async () => {
  await page.goto(`${baseUrl}/lab/tree/${notebook}`, { waitUntil: "domcontentloaded" });
  await page.locator(".jp-Notebook .jp-Cell").first().waitFor({ timeout: 60_000 });
  await page.locator("#jp-main-statusbar").getByText(/\| Idle/).waitFor({ timeout: 60_000 });
  await page.locator(".jp-Disttrain-status").click(); // the sidebar stays open throughout
  await page.locator(".jp-DisttrainPanel").waitFor({ state: "visible", timeout: 10_000 });

  await waitForPrompt(await runCellOn(page, 0));

  // a rank raises among lost connections
  await runCellOn(page, 1);
  await page.locator(`${dash("cause-fail")} .distrain-header[data-state="Failed"]`).waitFor({ timeout: JOB_TIMEOUT });
  await page.waitForTimeout(1500); // the last render
  result.failed = await seen("cause-fail");
  result.failedRow = await sidebarRow("local/cause-fail", "Failed");
  await page.locator(dash("cause-fail")).screenshot({ path: path.join(outDir, "failed-job.png") });

  // a hang: the state, the status bar, then Stop
  await runCellOn(page, 2);
  await page.locator(`${dash("cause-hang")} .distrain-header[data-state="Hung"]`).waitFor({ timeout: JOB_TIMEOUT });
  result.hung = await seen("cause-hang");
  result.hungRow = await sidebarRow("local/cause-hang", "Hung");
  result.status = await page.locator(".jp-Disttrain-status").textContent();
  await page.locator(dash("cause-hang")).screenshot({ path: path.join(outDir, "hung-job.png") });
  await page.locator(`${dash("cause-hang")} button.distrain-stop`).click();
  await page.locator(`${dash("cause-hang")} .distrain-header[data-state="Stopped"]`).waitFor({ timeout: 60_000 });
  await page.waitForTimeout(1500);
  result.stopped = await seen("cause-hang");
  await page.screenshot({ path: path.join(outDir, "jupyterlab-cause.png") });
});
