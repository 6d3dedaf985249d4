// Drives the real npm client libraries against a running gateway and prints what they received.
//
// Usage: node clients.js twocaptcha|anticaptcha|anticaptcha_passthrough GATEWAY_URL KEY
// (NODE_PATH points at the node_modules that scripts/test installs under target/node).
//
// Prints one JSON object: {"results": [{"case", "kind", "answer", "task_id"}...]}. The calling
// Rust test (tests/it/node_clients.rs) verifies every token once at the simulator; this script
// only uses the libraries as their users do.
//
// Base URLs: both libraries hard-code their provider's host. `@2captcha/captcha-solver` reads
// it through the `in` and `res` getters of its `Solver`, so a subclass overrides those two and
// nothing else. `@antiadmin/anticaptchaofficial` posts with the shared `axios` instance to
// `https://api.anti-captcha.com/`; a request interceptor sends those requests to the gateway,
// path and body unchanged (as the Python tests mount a transport adapter). The libraries build
// every request and read every answer themselves.
"use strict";

const PAGE = "https://example.com/login";
// A real 1x1 PNG padded to a plausible captcha size: the gateway checks magic bytes and size.
const PNG = Buffer.concat([
  Buffer.from(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==",
    "base64",
  ),
  Buffer.alloc(200),
]);
const GEETEST_V4_ID = "e392e1d7fd421dc63325744d5a2b9c73";
const PROXY = { proxy: "login:secret@127.0.0.1:3128", proxytype: "HTTP" };
const UA = "Mozilla/5.0 (npm test)";

async function runTwoCaptcha(base, key) {
  const { Solver } = require("@2captcha/captcha-solver");
  class GatewaySolver extends Solver {
    get in() {
      return `${base}/in.php`;
    }
    get res() {
      return `${base}/res.php`;
    }
  }
  const solver = new GatewaySolver(key, 500);
  const cases = [
    ["recaptcha_v2", "recaptcha_v2", () =>
      solver.recaptcha({ pageurl: PAGE, googlekey: "6Le-npm-v2", invisible: 1 })],
    ["recaptcha_v3", "recaptcha_v3", () =>
      solver.recaptcha({ pageurl: PAGE, googlekey: "6Le-npm-v3", version: "v3",
        action: "login", min_score: 0.3 })],
    ["turnstile", "turnstile", () =>
      solver.cloudflareTurnstile({ pageurl: PAGE, sitekey: "0x4AAAAAAAnpm", action: "login",
        data: "cdata-npm" })],
    ["geetest", "geetest_v3", () =>
      solver.geetest({ pageurl: PAGE, gt: "022397c99c9f646f6477822485f30404",
        challenge: "c0ffee00npm" })],
    ["hcaptcha", "hcaptcha", () =>
      solver.hcaptcha({ pageurl: PAGE, sitekey: "10000000-ffff-ffff-ffff-0000000npm",
        data: "rqdata-npm", userAgent: UA, invisible: 1 })],
    ["funcaptcha", "funcaptcha", () =>
      solver.funCaptcha({ pageurl: PAGE, publickey: "69A21A01-CC7B-B9C6-0F9A-E7FA06677npm",
        surl: "https://client-api.arkoselabs.com" })],
    ["lemin", "lemin", () =>
      solver.lemin({ pageurl: PAGE, captcha_id: "CROPPED_3dfdd5c_npm",
        div_id: "lemin-cropped-captcha", api_server: "api.leminnow.com" })],
    ["geetest_v4", "geetest_v4", () =>
      solver.geetestV4({ pageurl: PAGE, captcha_id: GEETEST_V4_ID })],
    ["mtcaptcha", "mtcaptcha", () =>
      solver.mtCaptcha({ pageurl: PAGE, sitekey: "MTPublic-npm" })],
    ["friendly_captcha", "friendly_captcha", () =>
      solver.friendlyCaptcha({ pageurl: PAGE, sitekey: "FCMGnpm" })],
    ["datadome", "datadome", () =>
      solver.dataDome({ pageurl: PAGE,
        captcha_url: "https://geo.captcha-delivery.com/captcha/?initialCid=npm",
        userAgent: UA, ...PROXY })],
    ["image", "image", () =>
      solver.imageCaptcha({ body: `data:image/png;base64,${PNG.toString("base64")}`,
        numeric: 4, min_len: 2, max_len: 8 })],
    ["text", "text", () => solver.text({ textcaptcha: "What is two plus two?", lang: "en" })],
    // Types the gateway does not declare pass through to the in.php account as sent.
    ["amazon_waf", "other", () =>
      solver.amazonWaf({ pageurl: PAGE, sitekey: "AQIDAHjcYu/GjX+QlghicBgQ/7bFaQZ+m5FKCMDnO+vTp",
        iv: "CgAHbCe2GgAAAAAj", context: "9BUgmlm48F92WUoqv97a49ZuEJJ50TCk9MVr3C7WMtQ0X6flVbufM4n8" })],
    ["keycaptcha", "other", () =>
      solver.keyCaptcha({ pageurl: PAGE, userId: 184015,
        sessionId: "9ff29e0176e78eb7ba59314f92dbac1b",
        webServerSign: "964635241a3e5e76980f2572e5f63452",
        webServerSign2: "3ca802a38ffc5831fa293ac2819b1204" })],
    ["coordinates", "coordinates", () =>
      solver.coordinates({ body: PNG.toString("base64"), textinstructions: "Select all the cats" })],
  ];
  // Every case at once, as a fleet's workers call it.
  const results = await Promise.all(cases.map(async ([name, kind, call]) => {
    try {
      const r = await call();
      return { case: name, kind, answer: r.data, task_id: r.id };
    } catch (e) {
      throw new Error(`${name}: ${e && e.message ? e.message : e}`);
    }
  }));
  return results;
}

function antiCaptcha(base, key) {
  const ac = require("@antiadmin/anticaptchaofficial");
  const axios = require("axios");
  axios.interceptors.request.use((config) => {
    config.url = config.url.replace("https://api.anti-captcha.com/", `${base}/`);
    return config;
  });
  ac.setAPIKey(key);
  ac.shutUp();
  // The library's own settings for how soon and how often it polls.
  ac.settings.firstAttemptWaitingInterval = 1;
  ac.settings.normalWaitingInterval = 1;
  return ac;
}

// The library keeps one task's state in a module-wide session, so its users solve one at a time.
async function inTurn(cases) {
  const results = [];
  for (const [name, kind, call] of cases) {
    let answer;
    try {
      answer = await call();
    } catch (e) {
      throw new Error(`${name}: ${e && e.message ? e.message : e}`);
    }
    results.push({ case: name, kind, answer });
  }
  return results;
}

async function runAntiCaptcha(base, key) {
  const ac = antiCaptcha(base, key);
  return inTurn([
    ["recaptcha_v2", "recaptcha_v2", () =>
      ac.solveRecaptchaV2Proxyless(PAGE, "6Le-npm-anti-v2", true)],
    ["recaptcha_v3", "recaptcha_v3", () => ac.solveRecaptchaV3(PAGE, "6Le-npm-anti-v3", 0.3, "login")],
    ["turnstile", "turnstile", () =>
      ac.solveTurnstileProxyless(PAGE, "0x4AAAAAAAnpmanti", "login", "cdata-npm", "")],
    ["geetest", "geetest_v3", () =>
      ac.solveGeeTestProxyless(PAGE, "022397c99c9f646f6477822485f30404", "c0ffee01npm",
        "api.geetest.com")],
    ["hcaptcha", "hcaptcha", () =>
      ac.solveHCaptchaProxyless(PAGE, "10000000-ffff-ffff-ffff-000000npmac", UA,
        { rqdata: "rqdata-npm-anti" }, true)],
    ["funcaptcha", "funcaptcha", () => {
      ac.settings.funcaptchaApiJSSubdomain = "client-api.arkoselabs.com";
      ac.settings.funcaptchaDataBlob = "b10b-npm";
      return ac.solveFunCaptchaProxyless(PAGE, "69A21A01-CC7B-B9C6-0F9A-E7FA066npmac");
    }],
    ["geetest_v4", "geetest_v4", () => ac.solveGeeTestV4Proxyless(PAGE, GEETEST_V4_ID)],
    ["friendly_captcha", "friendly_captcha", () =>
      ac.solveFriendlyCaptchaProxyless(PAGE, "FCMGnpmanti")],
    ["image", "image", () => {
      ac.settings.numeric = 1;
      ac.settings.minLength = 2;
      return ac.solveImage(PNG.toString("base64"));
    }],
    ["coordinates", "coordinates", () =>
      ac.solveImageToCoordinates(PNG.toString("base64"), "click the cats")],
    ["rectangles", "coordinates", () =>
      ac.solveImageToCoordinates(PNG.toString("base64"), "box the cats", "rectangles")],
  ]);
}

async function runAntiCaptchaPassthrough(base, key) {
  const ac = antiCaptcha(base, key);
  return inTurn([
    ["amazon", "other", () =>
      ac.solveAmazonProxyless(PAGE, "AQIDAHjcYu/GjX+QlghicBgQ/7bFaQZ+m5FKCMDnO+vTp",
        "CgAHbCe2GgAAAAAj", "9BUgmlm48F92WUoqv97a49ZuEJJ50TCk9MVr3C7WMtQ0X6flVbufM4n8")],
    ["prosopo", "other", () =>
      ac.solveProsopoProxyless(PAGE, "5EZVvsHMrKCFKp5NYNoTyDjTjetoVo1Z4UNNbTwJf1GfN6Xm")],
  ]);
}

async function main() {
  const [mode, rawBase, key] = process.argv.slice(2);
  const base = rawBase.replace(/\/+$/, "");
  const run = {
    twocaptcha: runTwoCaptcha,
    anticaptcha: runAntiCaptcha,
    anticaptcha_passthrough: runAntiCaptchaPassthrough,
  }[mode];
  if (!run) throw new Error(`unknown mode ${mode}`);
  const results = await run(base, key);
  process.stdout.write(JSON.stringify({ results }));
}

main().catch((e) => {
  process.stderr.write(`${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
