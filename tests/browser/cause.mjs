// Drives JupyterLab (light, then dark) and Notebook 7 in Debian's Chromium (1440x900, the jobs
// panel open) through the moments a job goes wrong, and reads what each view says.
//
//   node cause.mjs BASE_URL NOTEBOOK OUT_DIR
//
// The notebook (written by test_cause_browser.py) has code cells: load the extension; a 2x2
// job where rank 1 raises among lost gloo connections ("cause-fail"); a 2x2 job whose rank 2 is
// SIGKILLed once and torchrun restarts from checkpoint 30 (a long name, --max-restarts 1,
// watched for Stop and Where? while its ranks read Restarting); a 2x2 session, its cell that
// raises on every rank and its next cell, which succeeds ("cause-sess"); a job whose rank 1 sleeps inside the loop ("cause-hang",
// --hang-after 3), a JAX job whose rank 1 raises ("cause-jax"), a script run with `disttrain run`
// whose argparse exits on every rank ("cause-args") and a --wait job ("cause-wait"). One kernel runs them all in JupyterLab; every dashboard is read in the
// light theme and again in the dark one; the notebook is saved and opened in Notebook 7 (same
// server, same kernel), where the dashboards are read a third time, the jobs panel is opened
// from the View menu and from the toolbar, logs open below the notebook, and the hung job is
// stopped. Prints one JSON object; screenshots in OUT_DIR/{light,dark,notebook7}.

import fs from "node:fs";
import path from "node:path";
import { OPEN_TIMEOUT, defineChangeWatch, openBrowser, openNotebook, readNow, runCell as runCellOn, runScenario, waitForPrompt } from "./lab.mjs";
import { lowContrast } from "./contrast.mjs";
import { resumeBelow } from "./resume.mjs";

const [baseUrl, notebook, outDir] = process.argv.slice(2);
const JOB_TIMEOUT = 180_000;
const VIEW = { width: 1440, height: 900 };
export const CELL = { load: 0, fail: 1, recover: 2, session: 3, sessionCell: 4, hang: 5, checkpoints: 6, sessionNext: 7, jax: 8, args: 9, wait: 10 };
// the session's next cell is found by its source wherever cells were inserted above it
const NEXT_CELL = "# the session's next cell";
const JOBS = { fail: "cause-fail", recover: "cause-recovered-after-a-kill-c3-7f2a", hang: "cause-hang", jax: "cause-jax", args: "cause-args", wait: "cause-wait" };

for (const theme of ["light", "dark", "notebook7"]) fs.mkdirSync(path.join(outDir, theme), { recursive: true });
const { page: lab, result, close } = await openBrowser(VIEW);
let page = lab;
const dash = (key) => (key in JOBS ? `.distrain-job-${JOBS[key]}` : `[data-distrain-test="${key}"] .distrain-dashboard`);

// Mark the session's cells (their dashboards carry the session's name, not the cell's).
async function markSessionCells() {
  await page.locator(".jp-Notebook .jp-Cell").nth(CELL.sessionCell).evaluate((el) => { el.dataset.distrainTest = "session"; });
  await page.locator(".jp-Notebook .jp-Cell", { hasText: NEXT_CELL }).first().evaluate((el) => { el.dataset.distrainTest = "sessionNext"; });
}

// The session's row in the jobs panel (it must not read Failed while the session lives) and,
// expanded, its ranks once every one reads `state`; their text's contrast; folded again.
async function sessionInPanel(state) {
  const id = "local/cause-sess";
  const row = page.locator(`.jp-DisttrainPanel tr.jp-Disttrain-job[data-job-id="${id}"]`);
  await row.waitFor({ timeout: 30_000 });
  await row.click();
  const detail = `.jp-DisttrainPanel tr.jp-Disttrain-detail[data-job-id="${id}"]`;
  await page.waitForFunction(
    ({ detail, state }) => {
      const ranks = [...document.querySelectorAll(`${detail} tr.jp-Disttrain-rank`)];
      return ranks.length === 4 && ranks.every((tr) => tr.dataset.state === state);
    },
    { detail, state },
    { timeout: 60_000 },
  );
  const out = await page.evaluate(({ id, detail }) => ({
    state: document.querySelector(`.jp-DisttrainPanel tr.jp-Disttrain-job[data-job-id="${id}"]`).dataset.state,
    ranks: [...document.querySelectorAll(`${detail} tr.jp-Disttrain-rank`)].map((tr) => tr.dataset.state),
    text: document.querySelector(`.jp-DisttrainPanel tr.jp-Disttrain-job[data-job-id="${id}"]`).textContent,
  }), { id, detail });
  out.contrast = await page.evaluate(lowContrast, { sel: detail });
  await row.click();
  await page.locator(detail).waitFor({ state: "detached", timeout: 10_000 }).catch(() => {});
  return out;
}

// What the dashboard `key` shows: its header, cause, rows, Stop's box, chart colours, scroll.
async function seen(key) {
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
      const plot = root?.querySelector(".js-plotly-plot");
      const xs = (plot?.data ?? []).flatMap((t) => Array.from(t.x ?? []).map(Number));
      const rows = [...(root?.querySelectorAll("tr.distrain-rank-row") ?? [])];
      return {
        state: root?.querySelector(".distrain-header")?.dataset.state ?? null,
        cause: text('.distrain-reason[data-field="cause"]'),
        note: text('.distrain-note[data-field="cause"]'),
        recovered: text('[data-field="recovered"]'),
        diagnosis: text(".distrain-diagnosis"),
        comms: text(".distrain-comms"),
        commsBackend: root?.querySelector(".distrain-comms")?.dataset.backend ?? null,
        commsTables: root?.querySelectorAll(".distrain-comms table").length ?? 0,
        text: root?.innerText ?? "",
        phases: [...(root?.querySelectorAll(".distrain-phase") ?? [])].map((el) => ({
          phase: el.dataset.phase, state: el.dataset.state, text: el.textContent,
        })),
        firstStep: text(".distrain-first-step"),
        whereVisible: Boolean(root?.querySelector("button.distrain-where")?.offsetParent),
        traceback: text(".distrain-cause-traceback pre"),
        rate: text('[data-field="rate"]'),
        progress: text(".distrain-progress-text"),
        step: text('[data-field="step"]'),
        rows: rows.map((tr) => tr.dataset.state),
        rankSteps: rows.map((tr) => Number(tr.dataset.step)),
        restarts: rows.map((tr) => tr.querySelector('td[data-col="restarts"]')?.textContent ?? null),
        restartsSaid: text('[data-field="restarts"]'),
        chartLastX: xs.length ? Math.max(...xs) : null,
        // what the chart's front end received (appends, points) and holds back for a state update
        chartFeed: plot && {
          traces: (plot.data ?? []).length,
          appends: plot.dataset.distrainAppends ?? null,
          points: plot.dataset.distrainAppendedPoints ?? null,
          held: plot.dataset.distrainHeld ?? null,
        },
        stop: box && { left: box.left, right: box.right, top: box.top, bottom: box.bottom },
        stopVisible: Boolean(box),
        plotBackground: bg ? getComputedStyle(bg).backgroundColor : null,
        plotInk: tick ? getComputedStyle(tick).fill : null,
        themeInk: ink,
        hscroll: [...document.querySelectorAll(".jp-Notebook, .jp-DisttrainPanel, .jp-WindowedPanel-outer")].some(
          (el) => el.scrollWidth > el.clientWidth + 1,
        ),
        // the rank table ends inside its cell's output (a long reason wraps)
        tableInside: (() => {
          const table = root?.querySelector("table.distrain-ranks");
          const out = table?.closest(".jp-OutputArea-output, .jp-OutputArea");
          if (!table || !out) return true;
          return table.getBoundingClientRect().right <= out.getBoundingClientRect().right + 1;
        })(),
        // the plain-text outputs of the dashboard's cell (a stale "<Job ...>" echo would be one)
        echoes: [...(root?.closest(".jp-Cell")?.querySelectorAll('.jp-OutputArea-output[data-mime-type="text/plain"]') ?? [])]
          .map((el) => el.textContent)
          .filter((t) => t.includes("<Job ")),
        // how often the failure's sentence is said on the dashboard (once: the cause line)
        causeSaid: (root?.textContent.match(/ranks? stopped as a consequence/g) ?? []).length,
        failedSaid: (root?.textContent.match(/Failed/g) ?? []).length,
        view,
      };
    },
    { sel: dash(key), view: VIEW },
  );
}

// The jobs panel's open details of the failed job: its ranks' errors and "lost its peer" lines.
async function sidebarErrors() {
  return page.evaluate((id) => {
    const detail = document.querySelector(`.jp-DisttrainPanel tr.jp-Disttrain-detail[data-job-id="${id}"]`);
    return {
      errors: [...detail.querySelectorAll(".jp-Disttrain-rank-error")].map((e) => e.textContent),
      peers: [...detail.querySelectorAll("details.jp-Disttrain-rank-peer")].map((d) => ({
        summary: d.querySelector("summary").textContent,
        open: d.open,
        raw: d.querySelector("pre").textContent,
        background: getComputedStyle(d).backgroundColor,
      })),
      shown: detail.innerText,
    };
  }, `local/${JOBS.fail}`);
}

// Open job `id`'s row in the jobs panel: the click is dispatched to the row itself. A click
// at the row's place could land on the row above or below it: a poll re-renders the table,
// and a row opened just before (its details loading) grows between Playwright's aim and
// its click. (tests/browser/sidebar.mjs clicks rows as a pointer does.)
async function openRow(id) {
  await page.locator(`.jp-DisttrainPanel tr.jp-Disttrain-job[data-job-id="${id}"]`).dispatchEvent("click");
}

// The jobs panel's details of job `key` as a user reads them, opened if they are not.
async function panelDetail(key, until = "") {
  const id = `local/${JOBS[key]}`;
  const sel = `.jp-DisttrainPanel tr.jp-Disttrain-detail[data-job-id="${id}"]`;
  const detail = page.locator(sel);
  if (!(await detail.count())) await openRow(id);
  await detail.locator('button[data-action="logs"]').waitFor({ timeout: 30_000 });
  if (until) {
    // a later poll says it (up to 30 s; then as it is, for the test to judge)
    await page.waitForFunction(({ sel, until }) => document.querySelector(sel)?.innerText.includes(until), { sel, until }, { timeout: 30_000 }).catch(() => {});
  }
  await page.waitForTimeout(1000); // the details' last render
  return detail.innerText();
}

// Until the hung job's "hung" notice is gone from this page (up to 30 s; then the test judges).
async function hangNoticeGone() {
  await page.waitForFunction(
    (name) => ![...document.querySelectorAll(".Toastify__toast")].some((t) => t.textContent.includes(`Training job ${name} hung`)),
    JOBS.hang,
    { timeout: 30_000 },
  ).catch(() => {});
}

// The jobs panel's row of the script job whose argparse exited on every rank: its title and
// its details as read.
async function argsInPanel() {
  const title = await page.locator(`.jp-DisttrainPanel tr.jp-Disttrain-job[data-job-id="local/${JOBS.args}"]`).getAttribute("title");
  return { title, text: await panelDetail("args") };
}

// The "hung" notifications on the page (a hang's notice is kept until the hang is over).
const hungToasts = () => page.locator(".Toastify__toast").filter({ hasText: `Training job ${JOBS.hang} hung` }).count();

// The open details' Stop of ended job `name` (disabled) and its Show logs (enabled), as drawn.
async function detailActions(name) {
  const detail = `.jp-DisttrainPanel tr.jp-Disttrain-detail[data-job-id="local/${name}"]`;
  return page.evaluate((detail) => {
    const look = (b) => {
      const style = getComputedStyle(b);
      return { disabled: b.disabled, opacity: Number(style.opacity), cursor: style.cursor, color: style.color };
    };
    const root = document.querySelector(detail);
    return {
      stop: look(root.querySelector('button[data-action="stop"]')),
      logs: look(root.querySelector('button[data-action="logs"]')),
    };
  }, detail);
}

// The dashboards with a chart: those of the jobs that report metrics.
const CHARTED = ["fail", "recover", "hang", "jax"];

async function seenAll() {
  // A page opened later draws a chart from what its model held when the page loaded, then
  // from the kernel's answer to its "ready" (the full figure): read once the charts hold the
  // steps their rank tables say (up to 30 s; then as they are, for the checks to judge).
  await page.waitForFunction(
    (sels) => sels.every((sel) => {
      const root = document.querySelector(sel);
      const plot = root?.querySelector(".js-plotly-plot");
      const xs = (plot?.data ?? []).flatMap((t) => Array.from(t.x ?? []).map(Number));
      const steps = [...(root?.querySelectorAll("tr.distrain-rank-row") ?? [])].map((tr) => Number(tr.dataset.step));
      return xs.length > 0 && steps.length > 0 && Math.max(...xs) === Math.max(...steps);
    }),
    [dash("recover"), dash("hang")],
    { timeout: 30_000 },
  ).catch(() => {});
  // A dashboard scrolled into view draws its chart then (Notebook 7 renders the outputs
  // near the viewport): each chart of a job that reported metrics is waited for (up to
  // 30 s; then read as it is, for the checks to judge).
  for (const key of CHARTED) {
    await page.evaluate((sel) => document.querySelector(sel)?.querySelector(".distrain-header")?.scrollIntoView({ block: "center" }), dash(key));
    await page.waitForFunction(
      (sel) => Boolean(document.querySelector(sel)?.querySelector(".distrain-plot .main-svg .xtick text")),
      dash(key),
      { timeout: 30_000 },
    ).catch(() => {});
  }
  const out = {};
  for (const key of ["fail", "recover", "session", "sessionNext", "hang", "jax", "wait"]) out[key] = await seen(key);
  // text against its background: every dashboard (charts are checked by their ink), the panel
  out.contrast = {
    dashboards: await page.evaluate(lowContrast, { sel: ".distrain-dashboard", skip: ".js-plotly-plot" }),
    sidebar: await page.evaluate(lowContrast, { sel: ".jp-DisttrainPanel" }),
  };
  return out;
}

// The jobs panel's row of job `id` once it shows `state`.
async function sidebarRow(id, state) {
  const selector = `.jp-DisttrainPanel tr.jp-Disttrain-job[data-job-id="${id}"][data-state="${state}"]`;
  await page.locator(selector).waitFor({ timeout: 30_000 });
  return readNow(page, selector, (tr) => {
    const name = tr.querySelector("td.jp-Disttrain-name");
    const box = name.getBoundingClientRect();
    // inside the name's cell, whole: what tells a cut name apart, and the session badge
    const whole = (el) => (el ? el.getBoundingClientRect().width > 0 && el.getBoundingClientRect().right <= box.right + 1 : null);
    return {
      state: tr.dataset.state,
      title: tr.title,
      nameTitle: name.title,
      tail: name.querySelector(".jp-Disttrain-name-tail")?.textContent ?? null,
      tailWhole: whole(name.querySelector(".jp-Disttrain-name-tail")),
      badgeWhole: whole(name.querySelector(".jp-Disttrain-session")),
      step: tr.querySelector("td.jp-Disttrain-step")?.textContent ?? null,
      // the name's shown part: cut (an ellipsis) or whole
      headCut: (() => {
        const head = name.querySelector(".jp-Disttrain-name-head");
        return head.scrollWidth > head.clientWidth + 1;
      })(),
      head: name.querySelector(".jp-Disttrain-name-head").getBoundingClientRect().width,
    };
  });
}

// Each dashboard from its top, as much as the notebook shows of it (notifications hidden),
// then the whole page.
async function shots(dir) {
  const toasts = await page.addStyleTag({ content: ".Toastify { visibility: hidden !important; }" });
  for (const key of ["fail", "hang", "recover", "session"]) {
    const clip = await page.evaluate((sel) => {
      const root = document.querySelector(sel);
      root.scrollIntoView({ block: "start" });
      const box = root.getBoundingClientRect();
      const area = root.closest(".jp-Notebook").getBoundingClientRect();
      const top = Math.max(box.top, area.top);
      const bottom = Math.min(box.bottom, area.bottom);
      return { x: box.left, y: top, width: Math.min(box.width, area.right - box.left), height: bottom - top };
    }, dash(key));
    await page.waitForTimeout(300);
    await page.screenshot({ path: path.join(outDir, dir, `${key}-job.png`), clip });
  }
  await toasts.evaluate((el) => el.remove());
  await page.screenshot({ path: path.join(outDir, dir, "page.png") });
}

// The View menu's entry that shows the jobs panel: how many there are; clicked when `click`.
async function menuEntry(click = false) {
  await page.locator(".lm-MenuBar-itemLabel", { hasText: /^View$/ }).click();
  const entry = page.locator(".lm-Menu-itemLabel", { hasText: "Show Distributed Training Jobs" });
  await entry.first().waitFor({ timeout: 5_000 }).catch(() => {});
  const count = await entry.count();
  if (click && count) await entry.first().click();
  else await page.keyboard.press("Escape");
  return count;
}

const header = (key, state) => page.locator(`${dash(key)} .distrain-header[data-state="${state}"]`).first();

// The error output of cell `index` (the traceback IPython shows).
async function errorText(index) {
  const out = page.locator(".jp-Notebook .jp-Cell").nth(index).locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').last();
  await out.waitFor({ timeout: 60_000 });
  return out.textContent();
}

await runScenario({ page: lab, result, close }, outDir, async () => {
  // ---------------------------------------------------------------- JupyterLab, light
  await openNotebook(page, `${baseUrl}/lab/tree/${notebook}`);
  await page.locator(".jp-Disttrain-status").click(); // the panel stays open throughout
  await page.locator(".jp-DisttrainPanel").waitFor({ state: "visible", timeout: 30_000 });
  await markSessionCells();

  await waitForPrompt(await runCellOn(page, CELL.load));
  await runCellOn(page, CELL.fail);
  // at every change of the notebook's DOM until it ends: whether the recovering job's Stop and
  // Where? show in every state drawn once they first are (the kill, the restart, the run on).
  // A MutationObserver checks at every change, so each state drawn is checked, however late
  // a page short of CPU runs its timers. Its cell is kept in view by a timer of its own: the
  // notebook draws only the cells near the viewport.
  await defineChangeWatch(page);
  await page.evaluate(({ sel, index }) => {
    const watch = { restarting: 0, samples: 0, missing: 0, states: [], hidden: [], changes: [] };
    const t0 = Date.now();
    window.distrainRestartWatch = watch;
    const shown = (el) => Boolean(el && el.offsetParent !== null);
    let drawn = false;
    const keepInView = setInterval(() => {
      const header = document.querySelector(sel)?.querySelector(".distrain-header");
      if (header) header.scrollIntoView({ block: "nearest" });
      else {
        watch.missing += 1;
        window.jupyterapp.shell.currentWidget?.content?.scrollToItem?.(index, "start");
      }
    }, 100);
    const check = () => {
      const root = document.querySelector(sel);
      const header = root?.querySelector(".distrain-header");
      if (!header) return;
      const rows = [...root.querySelectorAll("tr.distrain-rank-row")].map((tr) => tr.dataset.state);
      const seenNow = `${header.dataset.state} ${rows.join(",")}`;
      if (watch.changes.at(-1)?.[1] !== seenNow) watch.changes.push([Date.now() - t0, seenNow]);
      if (header.dataset.state === "Succeeded") {
        stopChecks();
        clearInterval(keepInView);
        return;
      }
      const buttons = [root.querySelector("button.distrain-stop"), root.querySelector("button.distrain-where")];
      drawn ||= buttons.every(shown);
      if (!drawn) return;
      // the steps its ranks had reached when first seen (before the kill at step 35 or not)
      watch.firstSteps ??= [...root.querySelectorAll("tr.distrain-rank-row")].map((tr) => Number(tr.dataset.step));
      watch.samples += 1;
      watch.firstMs ??= Date.now() - t0;
      watch.lastMs = Date.now() - t0;
      if (!watch.states.includes(header.dataset.state)) watch.states.push(header.dataset.state);
      if (rows.includes("Restarting")) watch.restarting += 1;
      if (!buttons.every(shown)) watch.hidden.push({ state: header.dataset.state, rows, stop: shown(buttons[0]), where: shown(buttons[1]) });
    };
    // at every change, painted or not (stricter than per frame; the empty charts once blamed on
    // the per-frame watch were a lost state update in StreamingFigure, since mended)
    const stopChecks = window.distrainOnChange(check, { perFrame: false });
  }, { sel: dash("recover"), index: CELL.recover });
  await runCellOn(page, CELL.recover); // queued behind the first: runs once it returned
  await header("fail", "Failed").waitFor({ timeout: JOB_TIMEOUT });
  await header("recover", "Succeeded").waitFor({ timeout: JOB_TIMEOUT });
  result.restartWatch = await page.evaluate(() => window.distrainRestartWatch);
  await waitForPrompt(await runCellOn(page, CELL.session));
  await waitForPrompt(await runCellOn(page, CELL.sessionCell));
  result.sessionError = await errorText(CELL.sessionCell);
  result.sessionRaised = await sessionInPanel("Raised"); // alive: its ranks raised, not Failed
  await waitForPrompt(await runCellOn(page, CELL.sessionNext));
  await header("sessionNext", "Succeeded").waitFor({ timeout: JOB_TIMEOUT });
  result.sessionReady = await sessionInPanel("Ready");
  await runCellOn(page, CELL.jax); // JAX's own collectives: no NCCL reading anywhere
  await header("jax", "Failed").waitFor({ timeout: JOB_TIMEOUT });
  const argsCell = await runCellOn(page, CELL.args); // `disttrain run` of a script, from the notebook
  await waitForPrompt(argsCell);
  result.argsOutput = await argsCell.locator(".jp-OutputArea").innerText();
  // --wait: the kernel is busy until it ends (its rank 1 raises before a first step)
  await waitForPrompt(await runCellOn(page, CELL.wait));
  await header("wait", "Failed").waitFor({ timeout: JOB_TIMEOUT });
  await runCellOn(page, CELL.hang);
  await header("hang", "Hung").waitFor({ timeout: JOB_TIMEOUT });
  // the failed job's details open in the panel (its cause and the ranks' errors)
  await openRow(`local/${JOBS.fail}`);
  await page.locator(`.jp-DisttrainPanel tr.jp-Disttrain-detail[data-job-id="local/${JOBS.fail}"] .jp-Disttrain-reason`).first().waitFor({ timeout: 30_000 });
  await page.waitForTimeout(1500); // the last renders
  // its ranks' errors: the failing rank's own, the others "lost its peer" (raw text folded)
  result.sidebarErrors = await sidebarErrors();
  result.labDisabledStop = await detailActions(JOBS.fail);
  result.jaxPanel = await panelDetail("jax");
  result.argsPanel = await argsInPanel();
  result.light = await seenAll();
  result.rows = {
    fail: await sidebarRow(`local/${JOBS.fail}`, "Failed"),
    recover: await sidebarRow(`local/${JOBS.recover}`, "Succeeded"),
    hang: await sidebarRow(`local/${JOBS.hang}`, "Hung"),
    session: await sidebarRow("local/cause-sess", "Running"),
  };
  result.status = await page.locator(".jp-Disttrain-status").textContent();
  result.hungToastsLab = await hungToasts();
  result.labMenuEntry = await menuEntry();
  result.labToolbar = await page.locator('.jp-NotebookPanel-toolbar [data-jp-item-name="disttrain-jobs"]').count();
  await shots("light");
  // the recovered job's checkpoints: Resume puts its cell right below the browser, selected
  await waitForPrompt(await runCellOn(page, CELL.checkpoints));
  result.resume = await resumeBelow(page, ".distrain-ckpt-browser", 30);

  // ---------------------------------------------------------------- JupyterLab, dark
  await page.evaluate(() => window.jupyterapp.commands.execute("apputils:change-theme", { theme: "JupyterLab Dark" }));
  await page.waitForFunction(() => document.body.dataset.jpThemeName === "JupyterLab Dark", null, { timeout: 30_000 });
  await page.waitForTimeout(1500); // the charts restyle on the theme change
  result.dark = await seenAll();
  result.sidebarErrorsDark = await sidebarErrors();
  result.darkDisabledStop = await detailActions(JOBS.fail);
  result.jaxPanelDark = await panelDetail("jax");
  result.argsPanelDark = await argsInPanel();
  // Resume in the dark theme too: the new cell right below the browser (above the first), selected
  result.resumeDark = await resumeBelow(page, ".distrain-ckpt-browser", 20);
  await shots("dark");
  // the failed job's logs from the jobs panel, in the dark theme: its lines, readable
  // it opens a panel, no page: no wait for navigations after it (on a starved machine that
  // wait, a round trip through the busy page, outlasted the click's 30 s with the panel open)
  await page.locator(`.jp-DisttrainPanel tr.jp-Disttrain-detail[data-job-id="local/${JOBS.fail}"] button[data-action="logs"]`).click({ noWaitAfter: true });
  const darkLogs = page.locator(`.jp-DisttrainLogs[data-job-id="local/${JOBS.fail}"][data-rank="all"]`);
  await darkLogs.waitFor({ timeout: 30_000 });
  await page.waitForFunction((el) => el.textContent.trim() !== "", await darkLogs.locator(".jp-DisttrainLogs-text").elementHandle(), { timeout: 60_000 });
  result.darkLogs = {
    text: await darkLogs.locator(".jp-DisttrainLogs-text").textContent(),
    contrast: await page.evaluate(lowContrast, { sel: `.jp-DisttrainLogs[data-job-id="local/${JOBS.fail}"]` }),
  };
  await page.screenshot({ path: path.join(outDir, "dark", "logs.png") });
  // the notebook active again (its Ctrl+S saves it for Notebook 7 below)
  await page.locator("#jp-main-dock-panel .lm-TabBar-tab", { hasText: notebook.split("/").pop() }).first().click();
  await page.evaluate(() => window.jupyterapp.commands.execute("apputils:change-theme", { theme: "JupyterLab Light" }));
  await page.keyboard.press("Control+s");
  await page.locator(".jp-mod-dirty").waitFor({ state: "detached", timeout: 30_000 }).catch(() => {});

  // ---------------------------------------------------------------- Notebook 7, same kernel
  page = await lab.context().newPage();
  await page.setViewportSize(VIEW);
  await page.goto(`${baseUrl}/notebooks/${notebook}`, { waitUntil: "domcontentloaded", timeout: OPEN_TIMEOUT });
  await page.locator(".jp-Notebook .jp-Cell").first().waitFor({ timeout: OPEN_TIMEOUT });
  await markSessionCells();
  await header("hang", "Hung").waitFor({ timeout: 60_000 });
  // the jobs panel from the View menu
  await page.locator(".jp-DisttrainPanel").waitFor({ state: "hidden", timeout: 10_000 }).catch(() => {});
  result.nb7PanelBefore = await page.locator(".jp-DisttrainPanel").isVisible();
  result.nb7MenuEntry = await menuEntry(true);
  await page.locator(".jp-DisttrainPanel").waitFor({ state: "visible", timeout: 30_000 });
  result.nb7Toolbar = await page.locator('.jp-NotebookPanel-toolbar [data-jp-item-name="disttrain-jobs"]').count();
  await page.waitForTimeout(1500);
  result.notebook7 = await seenAll();
  result.nb7Rows = {
    fail: await sidebarRow(`local/${JOBS.fail}`, "Failed"),
    recover: await sidebarRow(`local/${JOBS.recover}`, "Succeeded"),
    hang: await sidebarRow(`local/${JOBS.hang}`, "Hung"),
    session: await sidebarRow("local/cause-sess", "Running"),
  };
  await shots("notebook7");

  // logs below the notebook, as tall as they are
  await openRow(`local/${JOBS.fail}`);
  const detail = page.locator(`.jp-DisttrainPanel tr.jp-Disttrain-detail[data-job-id="local/${JOBS.fail}"]`);
  await detail.locator('button[data-action="logs"]').waitFor({ timeout: 30_000 });
  await page.waitForTimeout(1500); // the last renders
  result.sidebarErrorsNb7 = await sidebarErrors();
  result.nb7JaxPanel = await panelDetail("jax");
  result.nb7ArgsPanel = await argsInPanel();
  result.nb7DetailCauseSaid = await detail.evaluate((el) => (el.textContent.match(/ranks? stopped as a consequence/g) ?? []).length);
  // the ended job's Stop: disabled, and looks it
  // read in the page at once: the panel re-renders its rows as it polls, and a button it
  // replaced while a handle to it was held has no computed style (opacity "", cursor "")
  result.nb7DisabledStop = await readNow(
    page,
    `.jp-DisttrainPanel tr.jp-Disttrain-detail[data-job-id="local/${JOBS.fail}"] button[data-action="stop"]`,
    (b) => {
      const style = getComputedStyle(b);
      return { disabled: b.disabled, opacity: Number(style.opacity), cursor: style.cursor };
    },
  );
  await detail.locator('button[data-action="logs"]').click();
  const logs = page.locator(`.jp-DisttrainLogs[data-job-id="local/${JOBS.fail}"][data-rank="all"]`);
  await logs.waitFor({ timeout: 30_000 });
  await page.waitForTimeout(1000); // sized once the first lines arrived
  result.nb7Logs = await logs.evaluate((el) => {
    const pane = el.closest("#jp-down-stack") ?? el;
    const text = el.querySelector(".jp-DisttrainLogs-text");
    return {
      below: el.closest("#jp-down-stack") !== null,
      paneHeight: pane.getBoundingClientRect().height,
      splitHeight: pane.parentElement?.clientHeight ?? 0,
      content: el.querySelector(".jp-DisttrainLogs-toolbar").offsetHeight + text.scrollHeight,
      clipped: el.scrollHeight > el.clientHeight + 1,
      text: text.textContent,
      launcher: Number(el.dataset.launcher ?? 0),
      status: el.querySelector(".jp-DisttrainLogs-status").textContent,
    };
  });
  await page.screenshot({ path: path.join(outDir, "notebook7", "logs.png") });

  // Stop from the hung job's dashboard, in view
  const stop = page.locator(`${dash("hang")} button.distrain-stop`);
  await stop.scrollIntoViewIfNeeded();
  await stop.click();
  await header("hang", "Stopped").waitFor({ timeout: 60_000 });
  await hangNoticeGone(); // the jobs panel's next polls
  result.stopped = await seen("hang");
  result.nb7HangPanel = await panelDetail("hang", "stopped by user");
  result.nb7HungToasts = await hungToasts();
  await page.locator(dash("hang")).screenshot({ path: path.join(outDir, "notebook7", "stopped-job.png") });
  await page.close();
  page = lab;
  await header("hang", "Stopped").waitFor({ timeout: 60_000 });
  await hangNoticeGone(); // this page's jobs panel's next polls
  result.stoppedLab = await seen("hang");
  result.hungToastsLabAfter = await hungToasts(); // the Lab page's "hung" notice is gone too
});
