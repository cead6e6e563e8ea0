// Drives JupyterLab in Debian's Chromium to check the job dashboard from the DOM.
//
//   node dashboard.mjs BASE_URL NOTEBOOK OUT_DIR
//
// The notebook (written by test_dashboard_browser.py) has four code cells:
// load the extension, a short 2x2 job ("browser-ok"), a long job
// ("browser-stop") and a --wait job whose rank 1 raises before its first step
// ("browser-wait"). Cells run one at a time; the script reads the dashboards'
// DOM (class names and data-* attributes), clicks the second job's Stop
// button, reads the --wait job's details in the jobs panel, saves screenshots
// in OUT_DIR and prints one JSON object of what it saw. Exit code 1 (with
// {"error": ...}) when a step times out.

import fs from "node:fs";
import path from "node:path";
import { defineChangeWatch, openBrowser, openNotebook, readNow, runCell as runCellOn, runScenario, waitForPrompt } from "./lab.mjs";

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
  await openNotebook(page, `${baseUrl}/lab/tree/${notebook}`);

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
  // the points since the first render come as appends (a page that said ready late got its
  // first steps as whole traces): wait for three (asserted by the test)
  await page.waitForFunction(
    (sel) => Number(document.querySelector(`${sel} .distrain-plot`)?.dataset.distrainAppendedPoints ?? 0) >= 3,
    dash("browser-stop"),
    { timeout: 60_000 },
  ).catch(() => {});
  result.beforeStop = {
    state: await headerState("browser-stop"),
    rows: await rows("browser-stop"),
    plot: await page
      .locator(`${dash("browser-stop")} .distrain-plot`)
      .evaluate((el) => ({ ...el.dataset })),
  };
  const stop = page.locator(`${dash("browser-stop")} button.distrain-stop`);
  result.stopEnabled = await stop.isEnabled();
  // how Stop looks enabled, and at once when the click disables it ("Stopping…", still shown)
  result.stopLooks = await stop.evaluate((b) => {
    const look = () => {
      const style = getComputedStyle(b);
      return { disabled: b.disabled, text: b.textContent.trim(), opacity: Number(style.opacity), cursor: style.cursor };
    };
    window.distrainStopLooks = [];
    new MutationObserver(() => {
      if (b.disabled && b.offsetParent !== null) window.distrainStopLooks.push(look());
    }).observe(b, { attributes: true, childList: true, subtree: true });
    return look();
  });
  const clicked = Date.now();
  await stop.click();
  await page
    .locator(`${dash("browser-stop")} .distrain-header[data-state="Stopped"]`)
    .waitFor({ timeout: 60_000 });
  result.stopSeconds = (Date.now() - clicked) / 1000;
  await page.waitForTimeout(1000);
  result.stoppingLooks = await page.evaluate(() => window.distrainStopLooks);
  result.stopped = {
    state: await headerState("browser-stop"),
    rows: await rows("browser-stop"),
    stopEnabled: await stop.isEnabled(),
  };
  await page.locator(dash("browser-stop")).screenshot({ path: path.join(outDir, "dashboard-stopped.png") });
  await page.screenshot({ path: path.join(outDir, "jupyterlab.png") });

  // 4: a --wait job whose rank 1 raises before any report(): checked in every frame painted
  // after a change of the notebook's DOM while it runs (a MutationObserver: each state shown is
  // seen, however late a CPU-starved page runs its timers). The kernel is busy: no Stop nor
  // Where? may show beside the note saying so.
  await defineChangeWatch(page);
  await page.evaluate((sel) => {
    const watch = { noted: 0, buttons: [] };
    window.distrainWaitWatch = watch;
    const shown = (el) => Boolean(el && el.offsetParent !== null);
    const check = () => {
      const root = document.querySelector(sel);
      const header = root?.querySelector(".distrain-header");
      if (!header) return;
      if (["Failed", "Succeeded", "Stopped"].includes(header.dataset.state)) stopChecks();
      const note = [...header.parentElement.querySelectorAll(".distrain-note")].map((el) => el.textContent).join(" ");
      if (note.includes("(--wait)") && !header.dataset.state.match(/Failed|Succeeded|Stopped/)) watch.noted += 1;
      const stop = root.querySelector("button.distrain-stop");
      const where = root.querySelector("button.distrain-where");
      if (shown(stop) || shown(where)) {
        watch.buttons.push({ state: header.dataset.state, stop: shown(stop), where: shown(where) });
      }
    };
    const stopChecks = window.distrainOnChange(check);
  }, dash("browser-wait"));
  const waitCell = await runCell(3);
  await page.locator(`${dash("browser-wait")} .distrain-header[data-state="Failed"]`).waitFor({ timeout: JOB_TIMEOUT });
  await waitForPrompt(waitCell);
  await page.waitForTimeout(1000); // the final render
  result.waited = {
    watch: await page.evaluate(() => window.distrainWaitWatch),
    ...(await page.locator(dash("browser-wait")).evaluate((root) => ({
      phases: [...root.querySelectorAll(".distrain-phase")].map((el) => ({
        phase: el.dataset.phase,
        state: el.dataset.state,
        text: el.textContent,
        weight: getComputedStyle(el).fontWeight,
      })),
      firstStep: root.querySelector(".distrain-first-step")?.textContent ?? null,
      notes: [...root.querySelectorAll(".distrain-note")].map((el) => el.textContent),
    }))),
  };
  await page.locator(dash("browser-wait")).screenshot({ path: path.join(outDir, "dashboard-wait-failed.png") });

  // the --wait job's details in the jobs panel
  await page.locator(".jp-Disttrain-status").click();
  // its first step never finished, so no "first step" is highlighted
  await page.locator('.jp-DisttrainPanel tr.jp-Disttrain-job[data-job-id="local/browser-wait"]').click();
  const waitDetail = page.locator('.jp-DisttrainPanel tr.jp-Disttrain-detail[data-job-id="local/browser-wait"]');
  await waitDetail.locator(".jp-Disttrain-phase-item").first().waitFor({ timeout: 30_000 });
  await page.waitForTimeout(1000);
  result.waited.panel = await readNow(
    page,
    '.jp-DisttrainPanel tr.jp-Disttrain-detail[data-job-id="local/browser-wait"]',
    (el) => ({
      phases: [...el.querySelectorAll(".jp-Disttrain-phase-item")].map((li) => ({
        phase: li.dataset.phase,
        state: li.dataset.state,
        text: li.textContent,
        weight: getComputedStyle(li).fontWeight,
      })),
      text: el.innerText,
    }),
  );
  await page.locator(".jp-DisttrainPanel").screenshot({ path: path.join(outDir, "panel-wait.png") });
});
