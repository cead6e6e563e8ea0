// Drives JupyterLab in Debian's Chromium to check the "Distributed Training" sidebar.
//
//   node sidebar.mjs BASE_URL NOTEBOOK OUT_DIR
//
// The notebook (written by test_sidebar_browser.py) has three code cells:
// load the extension, a short 2x2 job ("sidebar-ok"), a long job
// ("sidebar-stop"). The script opens the sidebar from the status bar item (at
// JupyterLab's default width, checking it never scrolls sideways),
// watches the first job's row until Succeeded, expands it, opens its logs
// (all ranks, then rank 2), stops the second job from its row, saves
// screenshots in OUT_DIR and prints one JSON object of what it saw. Exit
// code 1 (with {"error": ...}) when a step times out.

import fs from "node:fs";
import path from "node:path";
import { openBrowser, openNotebook, readNow, runCell as runCellOn, runScenario, waitForPrompt } from "./lab.mjs";

const [baseUrl, notebook, outDir] = process.argv.slice(2);
const JOB_TIMEOUT = 180_000;

fs.mkdirSync(outDir, { recursive: true });
const { page, result, close } = await openBrowser({ width: 1500, height: 1000 });

const row = (id) => `.jp-DisttrainPanel tr.jp-Disttrain-job[data-job-id="${id}"]`;
const detail = (id) => `.jp-DisttrainPanel tr.jp-Disttrain-detail[data-job-id="${id}"]`;

const runCell = (index) => runCellOn(page, index);

// Every state the row shows, sampled in the page until it reaches `final`.
async function watchStates(id, final, timeout) {
  return page.evaluate(
    ({ sel, final, timeout }) =>
      new Promise((resolve, reject) => {
        const seen = [];
        let maxRunning = 0;
        const started = Date.now();
        const timer = setInterval(() => {
          const state = document.querySelector(sel)?.dataset.state;
          const running = Number(document.querySelector(".jp-Disttrain-status")?.dataset.running ?? 0);
          maxRunning = Math.max(maxRunning, running);
          if (state && seen[seen.length - 1] !== state) seen.push(state);
          if (state === final) {
            clearInterval(timer);
            resolve({ seen, maxRunning });
          } else if (Date.now() - started > timeout) {
            clearInterval(timer);
            reject(new Error(`${sel} did not reach ${final}; saw ${seen.join(" -> ")}`));
          }
        }, 100);
      }),
    { sel: row(id), final, timeout },
  );
}

async function cells(id) {
  return readNow(page, row(id), (tr) => ({
    columns: tr.querySelectorAll("td").length,
    name: tr.querySelector("td.jp-Disttrain-name")?.textContent,
    state: tr.querySelector("td.jp-Disttrain-state .jp-Disttrain-state-text")?.textContent,
    step: tr.querySelector("td.jp-Disttrain-step")?.textContent,
    title: tr.title,
  }));
}

// The expanded row's facts (the columns folded into it): {key: [text, title]}.
async function facts(id) {
  return page.locator(`${detail(id)} dd[data-fact]`).evaluateAll((dds) =>
    Object.fromEntries(dds.map((dd) => [dd.dataset.fact, [dd.textContent, dd.title]])),
  );
}

// The sidebar fits its width: [scrollWidth, clientWidth] of the panel and of every box in it.
async function fits(label) {
  const sizes = await page.locator(".jp-DisttrainPanel").evaluate((panel) => ({
    panel: [panel.scrollWidth, panel.clientWidth],
    content: [panel.firstElementChild?.scrollWidth ?? 0, panel.firstElementChild?.clientWidth ?? 0],
  }));
  result.widths.push({ label, ...sizes });
}

async function ranks(id) {
  return page.locator(`${detail(id)} tr.jp-Disttrain-rank`).evaluateAll((trs) =>
    trs.map((tr) => ({
      rank: Number(tr.dataset.rank),
      state: tr.dataset.state,
      cells: [...tr.querySelectorAll("td")].map((td) => td.textContent),
    })),
  );
}

await runScenario({ page, result, close }, outDir, async () => {
  await openNotebook(page, `${baseUrl}/lab/tree/${notebook}`);

  // The status bar item opens the sidebar.
  const status = page.locator(".jp-Disttrain-status");
  await status.waitFor({ timeout: 30_000 });
  result.statusBefore = await status.textContent();
  await status.click();
  await page.locator(".jp-DisttrainPanel").waitFor({ state: "visible", timeout: 30_000 });
  await page.locator(".jp-DisttrainPanel .jp-Disttrain-empty").waitFor({ timeout: 30_000 });
  // the sidebar keeps JupyterLab's default width
  result.widths = [];
  result.panelWidth = await page.locator(".jp-DisttrainPanel").evaluate((el) => el.getBoundingClientRect().width);
  await fits("empty");
  result.emptyText = await page.locator(".jp-DisttrainPanel .jp-Disttrain-empty").textContent();
  // the title breaks between words only: its lines, and the widest word's width against the box
  result.title = await page.locator(".jp-DisttrainPanel .jp-Disttrain-title").evaluate((h) => {
    const range = document.createRange();
    range.selectNodeContents(h);
    const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
    return { text: h.textContent, lines: tops.size, width: h.getBoundingClientRect().width };
  });

  // 1: load the extension; 2: the short job, watched in the sidebar to the end.
  await waitForPrompt(await runCell(0));
  await runCell(1);
  await page.locator(row("local/sidebar-ok")).waitFor({ timeout: 60_000 });
  result.firstSeen = await cells("local/sidebar-ok");
  await fits("running");
  const watched = await watchStates("local/sidebar-ok", "Succeeded", JOB_TIMEOUT);
  result.okStates = watched.seen;
  result.maxRunning = watched.maxRunning;
  await page.locator(row("local/sidebar-ok")).click();
  await page.waitForFunction(
    (sel) => document.querySelectorAll(`${sel} tr.jp-Disttrain-rank[data-state="Succeeded"]`).length === 4,
    detail("local/sidebar-ok"),
    { timeout: 30_000 },
  );
  await page.waitForTimeout(500);
  result.ok = {
    cells: await cells("local/sidebar-ok"),
    facts: await facts("local/sidebar-ok"),
    ranks: await ranks("local/sidebar-ok"),
    metrics: await page.locator(`${detail("local/sidebar-ok")} dt[data-metric]`).allTextContents(),
    stopEnabled: await page.locator(`${detail("local/sidebar-ok")} button[data-action="stop"]`).isEnabled(),
    notebookEnabled: await page.locator(`${detail("local/sidebar-ok")} button[data-action="notebook"]`).isEnabled(),
    notebookTitle: await page.locator(`${detail("local/sidebar-ok")} button[data-action="notebook"]`).getAttribute("title"),
    notebookFile: await page.locator(`${detail("local/sidebar-ok")} .jp-Disttrain-notebook-file`).textContent(),
  };
  await page.locator(`${detail("local/sidebar-ok")} button[data-action="checkpoints"]`).click();
  await page.locator(`${detail("local/sidebar-ok")} .jp-Disttrain-checkpoints`).waitFor({ timeout: 30_000 });
  result.ok.checkpoints = await page.locator(`${detail("local/sidebar-ok")} .jp-Disttrain-checkpoints`).textContent();
  await fits("expanded");
  await page.locator(".jp-DisttrainPanel").screenshot({ path: path.join(outDir, "sidebar-default-width.png") });

  // Its logs in the main area: every rank, then rank 2 only.
  await page.locator(`${detail("local/sidebar-ok")} button[data-action="logs"]`).click();
  const viewer = page.locator('.jp-DisttrainLogs[data-job-id="local/sidebar-ok"]');
  const text = viewer.locator(".jp-DisttrainLogs-text");
  await page.waitForFunction(
    () => (document.querySelector('.jp-DisttrainLogs[data-job-id="local/sidebar-ok"] .jp-DisttrainLogs-text')?.textContent ?? "").includes("[rank 3]"),
    null,
    { timeout: 30_000 },
  );
  result.logsAll = (await text.textContent()).split("\n");
  await viewer.locator("select.jp-DisttrainLogs-rank").selectOption("2");
  await page.locator('.jp-DisttrainLogs[data-job-id="local/sidebar-ok"][data-rank="2"]').waitFor({ timeout: 30_000 });
  result.logsRank2 = (await text.textContent()).split("\n");
  result.logTab = await page.locator(".jp-MainAreaWidget.jp-DisttrainLogsPanel").count();
  await page.screenshot({ path: path.join(outDir, "sidebar-logs.png") });

  // Open notebook: brings the notebook that started the job back to the front.
  await page.locator(`${detail("local/sidebar-ok")} button[data-action="notebook"]`).click();
  await page.locator(".jp-NotebookPanel:visible").first().waitFor({ timeout: 30_000 });
  result.afterOpenNotebook = await page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel").first().textContent();
  await page.locator(row("local/sidebar-ok")).click(); // collapse

  // 3: the long job, stopped from its row.
  await runCell(2);
  await page.locator(row("local/sidebar-stop")).waitFor({ timeout: 60_000 });
  await page.locator(`${row("local/sidebar-stop")}[data-state="Running"]`).waitFor({ timeout: JOB_TIMEOUT });
  // it reports a total: the Step column shows a progress bar with its ETA
  await page.waitForFunction(
    (sel) => {
      const cell = document.querySelector(`${sel} td.jp-Disttrain-step`);
      return Number(cell?.dataset.percent ?? 0) > 0 && (cell?.title ?? "").includes("left");
    },
    row("local/sidebar-stop"),
    { timeout: 60_000 },
  );
  result.progress = await readNow(page, `${row("local/sidebar-stop")} td.jp-Disttrain-step`, (td) => ({
    percent: td.dataset.percent,
    text: td.querySelector(".jp-Disttrain-progress-text")?.textContent ?? "",
    title: td.title,
  }));
  result.statusRunning = await status.getAttribute("data-running");
  await page.locator(row("local/sidebar-stop")).click();
  const stop = page.locator(`${detail("local/sidebar-stop")} button[data-action="stop"]`);
  await stop.waitFor({ timeout: 30_000 });
  result.beforeStop = { cells: await cells("local/sidebar-stop"), stopEnabled: await stop.isEnabled() };
  await fits("running expanded");
  const clicked = Date.now();
  await stop.click();
  await page.locator(`${row("local/sidebar-stop")}[data-state="Stopped"]`).waitFor({ timeout: 60_000 });
  result.stopSeconds = (Date.now() - clicked) / 1000;
  // the detail's next polls: its ranks Stopped and the reason, the status bar's count back to
  // 0 (what the test asserts; what shows after 30 s is asserted either way)
  await page.waitForFunction(
    (sel) => {
      const ranks = [...document.querySelectorAll(`${sel} tr.jp-Disttrain-rank`)];
      const reason = document.querySelector(`${sel} .jp-Disttrain-reason`)?.textContent;
      const running = document.querySelector(".jp-Disttrain-status")?.getAttribute("data-running");
      return ranks.length > 0 && ranks.every((tr) => tr.dataset.state === "Stopped") && reason === "stopped by user" && running === "0";
    },
    detail("local/sidebar-stop"),
    { timeout: 30_000 },
  ).catch(() => {});
  result.stopped = {
    cells: await cells("local/sidebar-stop"),
    ranks: await ranks("local/sidebar-stop"),
    stopEnabled: await page.locator(`${detail("local/sidebar-stop")} button[data-action="stop"]`).isEnabled(),
    reason: await page.locator(`${detail("local/sidebar-stop")} .jp-Disttrain-reason`).textContent().catch(() => ""),
  };
  result.statusAfter = await status.getAttribute("data-running");
  await fits("stopped");
  await page.screenshot({ path: path.join(outDir, "sidebar.png") });
});
