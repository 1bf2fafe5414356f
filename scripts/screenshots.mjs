#!/usr/bin/env node
// Screenshots of every console view, as a person signed in with a key sees them, from a running
// Purser (the demo, say): one PNG per view, full page, 1400 px wide.
//
//   node scripts/screenshots.mjs [--url http://127.0.0.1:8080] [--key KEY] [--out screenshots]
//
// The key defaults to $PURSER_KEY, then the demo's platform admin key. Uses the Chromium at
// $CHROMIUM (default /usr/bin/chromium) through playwright-core, as the console's tests do.
import { mkdirSync } from "node:fs";
import { join } from "node:path";

import { launchBrowser } from "../tests/e2e/harness.mjs";

const args = Object.fromEntries(process.argv.slice(2).reduce((pairs, a, i, all) => {
  if (a.startsWith("--")) pairs.push([a.slice(2), all[i + 1]]);
  return pairs;
}, []));
if ("help" in args) {
  console.log("usage: node scripts/screenshots.mjs [--url URL] [--key KEY] [--out DIR]");
  process.exit(0);
}
const url = (args.url ?? process.env.PURSER_SERVER ?? "http://127.0.0.1:8080").replace(/\/$/, "");
const key = args.key ?? process.env.PURSER_KEY ?? "purser-demo-admin-key-change-me";
const out = args.out ?? "screenshots";
mkdirSync(out, { recursive: true });

const VIEWS = ["Overview", "People", "Models", "GPU pools", "Queues", "Keys", "Audit"];

const browser = await launchBrowser();
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(url + "/");
  await page.locator("#key").fill(key);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.locator("#whoami").waitFor();
  const nav = page.getByRole("navigation");
  for (const view of VIEWS) {
    const link = nav.getByRole("link", { name: view });
    if ((await link.count()) === 0) continue;  // not for this role
    await link.click();
    await page.waitForLoadState("networkidle");
    await page.waitForTimeout(1500);  // the view's first poll and its charts
    const file = join(out, `${view.toLowerCase().replace(/\s+/g, "-")}.png`);
    await page.screenshot({ path: file, fullPage: true });
    const height = await page.evaluate(() => document.documentElement.scrollHeight);
    console.log(`${file}: ${height} px tall`);
  }
  if (errors.length > 0) {
    console.error(`script errors on the page:\n${errors.join("\n")}`);
    process.exitCode = 1;
  }
} finally {
  await browser.close();
}
