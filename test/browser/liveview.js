// Opens the live view of a sandbox in headless Chromium, waits for a frame,
// checks it is not blank, and clicks at (x, y) of the sandbox's screen
// through the page. Usage: node liveview.js URL X Y. Prints JSON.
const { chromium } = require('playwright-core');

(async () => {
  const [url, x, y] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
           '--disable-component-update', '--disable-sync'],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await page.goto(url);
    await page.waitForFunction(() => Number(document.body.dataset.frames || 0) >= 1 && document.getElementById('screen').naturalWidth > 0, null, { timeout: 30000 });
    // Not blank: some pixel of the frame is not black.
    const lit = await page.evaluate(() => {
      const img = document.getElementById('screen');
      const c = document.createElement('canvas');
      c.width = img.naturalWidth; c.height = img.naturalHeight;
      const g = c.getContext('2d');
      g.drawImage(img, 0, 0);
      const d = g.getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      for (let i = 0; i < d.length; i += 4) if (d[i] || d[i + 1] || d[i + 2]) n++;
      return n;
    });
    const box = await page.locator('#screen').boundingBox();
    const natural = await page.evaluate(() => document.getElementById('screen').naturalWidth);
    const s = box.width / natural;
    await page.mouse.click(box.x + x * s, box.y + y * s);
    await page.waitForTimeout(300);
    const frames = await page.evaluate(() => Number(document.body.dataset.frames));
    console.log(JSON.stringify({ lit, frames, width: natural }));
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
