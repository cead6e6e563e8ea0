// Drives JupyterLab (or Notebook 7, DEBUG_APP=notebook) in Debian's Chromium through the
// debugger console of a paused rank.
//
//   node debug.mjs BASE_URL NOTEBOOK OUT_DIR
//
// The notebook (written by test_debug_browser.py) has three code cells: load
// the extension, a 2x2 job whose rank 1 stops at breakpoint() ("browser-debug"),
// and %distrain_debug for it. The script waits for the dashboard to say Paused,
// opens the console, sends `p step` then `p rank` from its input line, screenshots it, sends
// `p total` in the dark theme, clicks Continue and waits for the job to succeed. Prints one JSON
// object of what it saw.

import fs from "node:fs";
import path from "node:path";
import { lowContrast } from "./contrast.mjs";
import { openBrowser, openNotebook, runCell as runCellOn, runScenario, waitForPrompt } from "./lab.mjs";

const [baseUrl, notebook, outDir] = process.argv.slice(2);
const JOB_TIMEOUT = 180_000;
const NOTEBOOK7 = process.env.DEBUG_APP === "notebook"; // Notebook 7 instead of JupyterLab

fs.mkdirSync(outDir, { recursive: true });
const { page, result, close } = await openBrowser({ width: 1300, height: 1600 });
const dash = ".distrain-job-browser-debug";
const runCell = (index) => runCellOn(page, index);

// Chooses `theme` from the Settings menu; resolves once the page wears it.
async function setTheme(theme) {
  await page.locator(".lm-MenuBar-itemLabel", { hasText: /^Settings$/ }).click();
  await page.locator(".lm-Menu-itemLabel", { hasText: /^Theme$/ }).hover();
  await page.locator(".lm-Menu-itemLabel", { hasText: new RegExp(`^${theme}$`) }).click();
  await page.waitForFunction((name) => document.body.dataset.jpThemeName === name, theme, { timeout: 30_000 });
}

await runScenario({ page, result, close }, outDir, async () => {
  const url = NOTEBOOK7 ? `${baseUrl}/notebooks/${notebook}` : `${baseUrl}/lab/tree/${notebook}`;
  await openNotebook(page, url);

  // every text a toast ever shows, in order (a shared toast's text changes as jobs join it)
  await page.evaluate(() => {
    window.__distrainToasts = [];
    new MutationObserver(() => {
      for (const el of document.querySelectorAll(".Toastify__toast")) {
        const text = el.textContent;
        if (!window.__distrainToasts.includes(text)) window.__distrainToasts.push(text);
      }
    }).observe(document.body, { childList: true, subtree: true, characterData: true });
  });

  await waitForPrompt(await runCell(0));
  await waitForPrompt(await runCell(1));
  await page.locator(`${dash} .distrain-header[data-state="Paused"]`).waitFor({ timeout: JOB_TIMEOUT });
  result.paused = {
    note: await page.locator(`${dash} [data-field="paused"]`).first().textContent(),
    notes: await page.locator(`${dash} [data-field="paused"]`).count(),
    // markup shown escaped ("in &lt;module&gt;"): where, with the element that shows it
    escaped: await page.locator(dash).evaluate((el) => {
      const at = el.textContent.indexOf("&lt;");
      if (at < 0) return null;
      const holder = [...el.querySelectorAll("*")].reverse().find((n) => n.textContent.includes("&lt;"));
      return `${holder?.tagName}.${holder?.className}: ${el.textContent.slice(Math.max(0, at - 80), at + 40)}`;
    }),
    // how often the dashboard says where rank 1 stopped (header, table, diagnosis)
    said: await page.locator(dash).evaluate((el) => el.textContent.split("rank 1 paused at").length - 1),
    rows: await page.locator(`${dash} tr.distrain-rank-row`).evaluateAll((trs) =>
      trs.map((tr) => ({ rank: Number(tr.dataset.rank), state: tr.dataset.state })),
    ),
  };

  // the job stays paused until Continue: the sidebar's listing (polled while hidden) sees it
  await page
    .locator(".Toastify__toast")
    .filter({ hasText: "browser-debug paused" })
    .first()
    .waitFor({ timeout: 60_000 });

  const consoleCell = await runCell(2);
  await waitForPrompt(consoleCell);
  const panel = page.locator(".distrain-debug");
  await panel.locator(".dd-where").waitFor({ timeout: 60_000 });
  result.where = await panel.locator(".dd-where").textContent();
  result.current = await panel.locator(".dd-current").textContent();

  const input = panel.locator("input[type=text]");
  await input.fill("p step");
  await input.press("Enter");
  await panel.locator(".dd-answer").first().waitFor({ timeout: 60_000 });
  result.answer = await panel.locator(".dd-answer").first().textContent();
  // a second command: the history reads oldest first, as a terminal does
  await input.fill("p rank");
  await input.press("Enter");
  await panel.locator(".dd-answer").nth(1).waitFor({ timeout: 60_000 });
  result.history = await panel.locator(".dd-answer").allTextContents();
  await panel.scrollIntoViewIfNeeded();
  await panel.screenshot({ path: path.join(outDir, "debug-console.png") });
  // the same paused console in the dark theme (Settings > Theme), then back to the light one
  result.lightInk = await panel.evaluate((el) => getComputedStyle(el).color);
  result.lightContrast = await page.evaluate(lowContrast, { sel: ".distrain-debug" });
  await setTheme("JupyterLab Dark");
  result.darkInk = await panel.evaluate((el) => getComputedStyle(el).color);
  result.darkContrast = await page.evaluate(lowContrast, { sel: ".distrain-debug" });
  // the history in the dark theme too: a third answer below the first two
  await input.fill("p total");
  await input.press("Enter");
  await panel.locator(".dd-answer").nth(2).waitFor({ timeout: 60_000 });
  result.darkHistory = await panel.locator(".dd-answer").allTextContents();
  result.darkHistoryContrast = await page.evaluate(lowContrast, { sel: ".distrain-debug" });
  await panel.screenshot({ path: path.join(outDir, "debug-console-dark.png") });
  await setTheme("JupyterLab Light");

  await panel.getByRole("button", { name: "Continue" }).click();
  await page.locator(`${dash} .distrain-header[data-state="Succeeded"]`).waitFor({ timeout: JOB_TIMEOUT });
  result.final = await page.locator(`${dash} .distrain-header`).getAttribute("data-state");
  // the sidebar's listing sees the end: its notice, then every toast text shown so far
  await page
    .locator(".Toastify__toast")
    .filter({ hasText: "browser-debug succeeded" })
    .first()
    .waitFor({ timeout: 60_000 });
  result.toasts = await page.evaluate(() => window.__distrainToasts);
  await panel.locator("text=no rank is paused").waitFor({ timeout: 60_000 });
  result.afterStatus = await panel.locator("text=no rank is paused").count();
  // nothing to send to: the empty selector comes with disabled controls
  result.afterControls = await panel.evaluate((el) => {
    const button = (name) => [...el.querySelectorAll("button")].find((b) => b.textContent.trim() === name);
    return {
      options: el.querySelector("select")?.options.length ?? null,
      send: button("Send")?.disabled ?? null,
      continue: button("Continue")?.disabled ?? null,
      input: el.querySelector("input[type=text]")?.disabled ?? null,
    };
  });
});
