// Drives JupyterLab in Debian's Chromium for bench/dashboard_cpu.py: the CPU a running job's
// dashboard costs the browser, the kernel and the server.
//
//   node bench/dashboard_cpu.mjs BASE_URL NOTEBOOK WARMUP_S WINDOW_S
//
// The notebook has two code cells: load the extension (and set the chart's draw interval),
// a 2x2 job that reports a step every 50 ms. Once the job has run WARMUP_S seconds, the
// CPU seconds of every Chromium process, IPython kernel and Jupyter server on the machine
// are read from /proc at the start and the end of WINDOW_S seconds. Prints one JSON object.

import fs from "node:fs";
import { openBrowser, openNotebook, runCell, waitForPrompt } from "../tests/browser/lab.mjs";

const [baseUrl, notebook, warmup, window] = process.argv.slice(2);

// CPU seconds by kind of process (all of the machine's: run it on a quiet machine).
function cpuByKind() {
  const out = { chromium: 0, kernel: 0, server: 0 };
  for (const pid of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const cmd = fs.readFileSync(`/proc/${pid}/cmdline`, "utf8");
      const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      const seconds = (Number(fields[11]) + Number(fields[12])) / 100;
      if (cmd.includes("chromium")) out.chromium += seconds;
      else if (cmd.includes("ipykernel")) out.kernel += seconds;
      else if (/-m\0jupyterlab/.test(cmd)) out.server += seconds;
    } catch {
      // the process ended while it was read
    }
  }
  return out;
}

const { page, result, close } = await openBrowser({ width: 1440, height: 900 });
try {
  await openNotebook(page, `${baseUrl}/lab/tree/${notebook}`);
  await waitForPrompt(await runCell(page, 0));
  await runCell(page, 1);
  await page.locator(".distrain-header[data-state=Running]").waitFor({ timeout: 120_000 });
  await page.waitForTimeout(Number(warmup) * 1000);
  const appends = page.locator(".distrain-plot-panel [data-distrain-appends]").first();
  const drawn = async () => Number((await appends.getAttribute("data-distrain-appends")) ?? 0);
  const before = cpuByKind();
  const drawnBefore = await drawn();
  await page.waitForTimeout(Number(window) * 1000);
  const after = cpuByKind();
  result.draws = (await drawn()) - drawnBefore;
  result.state = await page.locator(".distrain-header").first().getAttribute("data-state");
  result.cpu = Object.fromEntries(Object.keys(after).map((k) => [k, after[k] - before[k]]));
} catch (error) {
  result.error = String(error);
}
console.log(JSON.stringify(result));
await close();
