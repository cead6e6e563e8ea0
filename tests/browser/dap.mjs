// Drives JupyterLab's own Debugger panel over a 2x2 job in Debian's Chromium.
//
//   node dap.mjs BASE_URL NOTEBOOK OUT_DIR
//
// The notebook (written by test_dap_browser.py) has three code cells: load the
// extension, a 2x2 job (DAP_JOB, "browser-dap"), and `%distrain_debug ... --rank
// DAP_RANK --panel` (rank 2; the environment names others). DAP_APP=notebook
// drives Notebook 7 instead of JupyterLab.
// The script turns the kernel's debugger on, clicks the gutter of the job cell's
// line 5, runs the cell, waits for every rank to pause and the panel to show a
// stopped rank's frame (the last to stop), runs the third cell so the panel shows that rank, clicks
// Next (Step over), then Continue, and waits for the job to succeed. Prints one
// JSON object of what it saw.

import fs from "node:fs";
import path from "node:path";
import { openBrowser, openNotebook, runCell as runCellOn, runScenario, waitForPrompt } from "./lab.mjs";

const [baseUrl, notebook, outDir] = process.argv.slice(2);
// A job's pause and its end: on the Kubernetes emulator every rank pauses only once both
// pods have started and imported torch (120-170 s of the test on a loaded 2-CPU host).
const JOB_TIMEOUT = 300_000;
const LINE = 5;
const RANK = Number(process.env.DAP_RANK ?? "2"); // the rank the panel is made to show
const JOB = process.env.DAP_JOB ?? "browser-dap";
const NOTEBOOK7 = process.env.DAP_APP === "notebook"; // Notebook 7 instead of JupyterLab

fs.mkdirSync(outDir, { recursive: true });
const { page, result, close } = await openBrowser({ width: 1400, height: 1300 });
const dash = `.distrain-job-${JOB}`;
const runCell = (index) => runCellOn(page, index);
const sidebar = page.locator(".jp-DebuggerSidebar");

// The top frame's "name" and "location" as the Callstack shows them, once there is one.
async function topFrame(expected) {
  const frame = sidebar.locator(".jp-DebuggerCallstackFrame").first();
  await frame.locator(".jp-DebuggerCallstackFrame-location", { hasText: expected }).waitFor({ timeout: 60_000 });
  return {
    name: await frame.locator(".jp-DebuggerCallstackFrame-name").textContent(),
    location: await frame.locator(".jp-DebuggerCallstackFrame-location").textContent(),
  };
}

// The text of `locator` once it matches `pattern` (within a minute).
async function until(locator, pattern) {
  const deadline = Date.now() + 60_000;
  let text = "";
  while (Date.now() < deadline) {
    text = await locator.innerText();
    if (pattern.test(text)) return text;
    await page.waitForTimeout(200);
  }
  throw new Error(`no ${pattern} in: ${text}`);
}

await runScenario({ page, result, close }, outDir, async () => {
  const url = NOTEBOOK7 ? `${baseUrl}/notebooks/${notebook}` : `${baseUrl}/lab/tree/${notebook}`;
  await openNotebook(page, url);
  await waitForPrompt(await runCell(0));

  const bug = page.locator(".jp-DebuggerBugButton").first();
  await bug.waitFor({ timeout: 60_000 });
  await page.waitForFunction(() => {
    const b = document.querySelector(".jp-DebuggerBugButton");
    return b && !b.disabled;
  }, null, { timeout: 60_000 });
  await bug.click();
  await page.locator('.jp-DebuggerBugButton[aria-pressed="true"]').first().waitFor({ timeout: 60_000 });
  if (!(await sidebar.isVisible())) {
    if (NOTEBOOK7) {
      // Notebook 7 keeps its side panels closed: the View menu opens the debugger's
      await page.locator(".lm-MenuBar-itemLabel", { hasText: /^View$/ }).click();
      await page.locator(".lm-Menu-itemLabel", { hasText: /Debugger/ }).first().click();
    } else {
      await page.locator('.jp-SideBar li[data-id="jp-debugger-sidebar"]').click();
    }
  }
  await sidebar.waitFor({ timeout: 60_000 });

  // the gutter of line LINE of the job's cell
  const cell = page.locator(".jp-Notebook .jp-Cell").nth(1);
  const line = await cell.locator(".cm-content .cm-line").nth(LINE - 1).boundingBox();
  const gutter = await cell.locator(".cm-gutter.cm-breakpoint-gutter").boundingBox();
  await page.mouse.click(gutter.x + gutter.width / 2, line.y + line.height / 2);
  const icons = cell.locator(".cm-gutterElement .cm-breakpoint-icon >> visible=true");
  await icons.first().waitFor({ timeout: 30_000 });
  result.breakpoints = await icons.count();

  await runCell(1);
  await page.locator(`${dash} tr.distrain-rank-row[data-state="Paused"]`).nth(3).waitFor({ timeout: JOB_TIMEOUT });
  result.paused = await page.locator(`${dash} tr.distrain-rank-row`).evaluateAll((trs) =>
    trs.map((tr) => ({
      rank: Number(tr.dataset.rank),
      state: tr.dataset.state,
      node: tr.cells[1]?.textContent?.trim(),
      host: tr.cells[2]?.textContent?.trim(),
    })),
  );
  result.stopped = await topFrame(`:${LINE}`);
  const variables = sidebar.locator(".jp-DebuggerVariables-body >> visible=true").first();
  await variables.getByText("step", { exact: true }).first().waitFor({ timeout: 60_000 });

  // the panel shows rank 2 (%distrain_debug --rank 2 --panel)
  await waitForPrompt(await runCell(2));
  result.focus = await page.locator(".jp-Notebook .jp-Cell").nth(2).locator(".jp-OutputArea").innerText();
  result.rank2 = await until(variables, new RegExp(`\\brank\\s+${RANK}\\b`));
  result.focused = await topFrame(`:${LINE}`);
  await page.screenshot({ path: path.join(outDir, "debugger-panel.png") });

  await sidebar.locator('[title^="Next"]').first().click();
  result.stepped = await topFrame(`:${LINE + 1}`);
  result.rank2Stepped = await until(variables, new RegExp(`\\bstep\\s+${RANK * 10 + 1}\\b`));

  await sidebar.locator('[title^="Continue"]').first().click();
  await page.locator(`${dash} .distrain-header[data-state="Succeeded"]`).waitFor({ timeout: JOB_TIMEOUT });
  result.final = await page.locator(`${dash} .distrain-header`).getAttribute("data-state");
}, async () => {
  result.dashboard = await page.locator(dash).innerText().catch(() => "");
  result.sidebar = (await sidebar.innerText().catch(() => "")).slice(0, 2000);
});
