"""Drive the real anti-captcha and CapSolver client libraries against a running gateway's JSON
task protocol (/createTask, /getTaskResult, /getBalance) and print what they received.

Usage: taskapi_clients.py anticaptcha|anticaptcha_passthrough|capsolver GATEWAY_URL KEY

Prints one JSON object: {"results": [{"case", "kind", "answer", "user_agent", "task_id"}...],
"extras": {...}}. The calling Rust test (tests/it/taskapi.rs) verifies every token through the
simulator's /verify; this script only uses the libraries as their users do.

Base URLs: `capsolver` reads `capsolver.api_base`, so it is simply pointed at the gateway.
`anticaptchaofficial` hard-codes `https://api.anti-captcha.com/` in every request; the closest
honest thing is a transport adapter mounted on the library's own requests session that sends
those requests to the gateway instead. The library builds every body and reads every answer
itself; only the host changes.
"""

import base64
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter

# A real 1x1 PNG padded to a plausible captcha size: the gateway checks magic bytes and size.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
) + b"\x00" * 200
PAGE = "https://example.com/login"
ANTI_CAPTCHA = "https://api.anti-captcha.com/"


class ToGateway(HTTPAdapter):
    """Sends requests addressed to anti-captcha's host to the gateway, path and body unchanged."""

    def __init__(self, base):
        super().__init__()
        self.base = base

    def send(self, request, **kwargs):
        path = urlsplit(request.url).path
        request.url = self.base + path
        return super().send(request, **kwargs)


def anti_solve(results, key, case, kind, solver, *args, **kwargs):
    """One anticaptchaofficial solve, as its users call it; its outcome appended to `results`."""
    solver.set_key(key)
    answer = solver.solve_and_return_solution(*args, **kwargs)
    if answer == 0:
        raise SystemExit(f"{case}: {solver.err_string}")
    ua = solver.get_user_agent() or None
    # hCaptcha's modules also read `solution.respKey` (`get_respkey()`).
    resp_key = solver.get_respkey() or None if hasattr(solver, "get_respkey") else None
    results.append({"case": case, "kind": kind, "answer": answer, "user_agent": ua,
                    "resp_key": resp_key, "task_id": solver.task_id})
    return solver


def page(solver, sitekey):
    solver.set_website_url(PAGE)
    solver.set_website_key(sitekey)
    return solver


def proxied(solver):
    solver.set_proxy_type("http")
    solver.set_proxy_address("127.0.0.1")
    solver.set_proxy_port(3128)
    solver.set_proxy_login("user")
    solver.set_proxy_password("secret")
    solver.set_user_agent("Mozilla/5.0 (anticaptcha test)")
    return solver


def run_anticaptcha(base, key):
    from anticaptchaofficial import antinetworking
    from anticaptchaofficial.friendlycaptchaproxyless import friendlyCaptchaProxyless
    from anticaptchaofficial.funcaptchaproxyless import funcaptchaProxyless
    from anticaptchaofficial.hcaptchaproxyless import hCaptchaProxyless
    from anticaptchaofficial.hcaptchaproxyon import hCaptchaProxyon
    from anticaptchaofficial.geetestproxyless import geetestProxyless
    from anticaptchaofficial.imagecaptcha import imagecaptcha
    from anticaptchaofficial.imagetocoordinates import imagetocoordinates
    from anticaptchaofficial.recaptchav2enterpriseproxyless import recaptchaV2EnterpriseProxyless
    from anticaptchaofficial.recaptchav2proxyless import recaptchaV2Proxyless
    from anticaptchaofficial.recaptchav2proxyon import recaptchaV2Proxyon
    from anticaptchaofficial.recaptchav3enterpriseproxyless import recaptchaV3EnterpriseProxyless
    from anticaptchaofficial.recaptchav3proxyless import recaptchaV3Proxyless
    from anticaptchaofficial.turnstileproxyless import turnstileProxyless
    from anticaptchaofficial.turnstileproxyon import turnstileProxyon

    antinetworking.session.mount(ANTI_CAPTCHA, ToGateway(base))
    results = []

    def solve(case, kind, solver, *args, **kwargs):
        return anti_solve(results, key, case, kind, solver, *args, **kwargs)

    # Each case on a thread of its own, as a fleet's workers use the library: its solvers keep
    # their state per instance, and the cases take as long as the slowest instead of their sum.
    with ThreadPoolExecutor(max_workers=10) as pool:
        def run(*args, **kwargs):
            return pool.submit(solve, *args, **kwargs)

        v2 = run("recaptcha_v2", "recaptcha_v2", page(recaptchaV2Proxyless(), "6Le-anti-v2"))
        invisible = page(recaptchaV2Proxyless(), "6Le-anti-v2i")
        invisible.set_is_invisible(1)
        cases = [v2, run("recaptcha_v2_invisible", "recaptcha_v2", invisible)]
        cases.append(run("recaptcha_v2_proxy", "recaptcha_v2",
                         proxied(page(recaptchaV2Proxyon(), "6Le-anti-v2p"))))
        cases.append(run("recaptcha_v2_enterprise", "recaptcha_v2",
                         page(recaptchaV2EnterpriseProxyless(), "6Le-anti-ent")))
        v3 = page(recaptchaV3Proxyless(), "6Le-anti-v3")
        v3.set_page_action("login")
        v3.set_min_score(0.3)
        cases.append(run("recaptcha_v3", "recaptcha_v3", v3))
        v3e = page(recaptchaV3EnterpriseProxyless(), "6Le-anti-v3e")
        v3e.set_page_action("login")
        v3e.set_min_score(0.7)
        cases.append(run("recaptcha_v3_enterprise", "recaptcha_v3", v3e))
        cases.append(run("turnstile", "turnstile", page(turnstileProxyless(), "0x4AAAAAAAanti")))
        cases.append(run("turnstile_proxy", "turnstile",
                         proxied(page(turnstileProxyon(), "0x4AAAAAAAantip"))))
        geetest = geetestProxyless()
        geetest.set_website_url(PAGE)
        geetest.set_gt_key("022397c99c9f646f6477822485f30404")
        geetest.set_challenge_key("c7e1a9b2d4f6")
        cases.append(run("geetest", "geetest_v3", geetest))
        image = imagecaptcha()
        image.set_numeric(1)
        image.set_minLength(4)
        cases.append(run("image", "image", image, None, **{"body": PNG}))
        # The declared kinds, with the setters the library has for each.
        hcaptcha = page(hCaptchaProxyless(), "10000000-ffff-ffff-ffff-000000000001")
        hcaptcha.set_is_invisible(1)
        hcaptcha.set_enterprise_payload({"rqdata": "rq-anti"})
        cases.append(run("hcaptcha", "hcaptcha", hcaptcha))
        cases.append(run("hcaptcha_proxy", "hcaptcha",
                         proxied(page(hCaptchaProxyon(), "10000000-ffff-ffff-ffff-00000000000p"))))
        funcaptcha = page(funcaptchaProxyless(), "69A21A01-CC7B-B9C6-0F9A-E7FA06677FFC")
        funcaptcha.set_js_api_domain("client-api.arkoselabs.com")
        funcaptcha.set_data_blob('{"blob":"b10b"}')
        cases.append(run("funcaptcha", "funcaptcha", funcaptcha))
        geetest_v4 = geetestProxyless()
        geetest_v4.set_website_url(PAGE)
        geetest_v4.set_version(4)
        geetest_v4.set_gt_key("e392e1d7fd421dc63325744d5a2b9c73")
        cases.append(run("geetest_v4", "geetest_v4", geetest_v4))
        cases.append(run("friendly_captcha", "friendly_captcha",
                         page(friendlyCaptchaProxyless(), "FCMGEMUD2KTDSQ5H")))
        points = imagetocoordinates()
        points.set_comment("click the cat")
        cases.append(run("coordinates", "coordinates", points, None, body=PNG))
        boxes = imagetocoordinates()
        boxes.set_comment("draw a box around the cat")
        boxes.set_mode("rectangles")
        cases.append(run("rectangles", "coordinates", boxes, None, body=PNG))
        # A case that failed raises here, with its message.
        v2 = [case.result() for case in cases][0]
    extras = {
        "balance": v2.get_balance(),
        "report_bad": v2.report_incorrect_recaptcha(),
    }
    return results, extras


def run_capsolver(base, key):
    import capsolver

    capsolver.api_base = base
    capsolver.api_key = key
    proxy = "http:127.0.0.1:3128:user:secret"
    cases = [
        ("recaptcha_v2", "recaptcha_v2",
         {"type": "ReCaptchaV2TaskProxyLess", "websiteURL": PAGE, "websiteKey": "6Le-cs-v2"}),
        ("recaptcha_v2_proxy", "recaptcha_v2",
         {"type": "ReCaptchaV2Task", "websiteURL": PAGE, "websiteKey": "6Le-cs-v2p",
          "proxy": proxy}),
        ("recaptcha_v2_enterprise", "recaptcha_v2",
         {"type": "ReCaptchaV2EnterpriseTaskProxyLess", "websiteURL": PAGE,
          "websiteKey": "6Le-cs-ent"}),
        ("recaptcha_v3", "recaptcha_v3",
         {"type": "ReCaptchaV3TaskProxyLess", "websiteURL": PAGE, "websiteKey": "6Le-cs-v3",
          "pageAction": "login"}),
        ("turnstile", "turnstile",
         {"type": "AntiTurnstileTaskProxyLess", "websiteURL": PAGE,
          "websiteKey": "0x4AAAAAAAcs"}),
        ("cloudflare_challenge", "cloudflare_challenge",
         {"type": "AntiCloudflareTask", "websiteURL": PAGE, "proxy": proxy}),
        ("geetest", "geetest_v3",
         {"type": "GeeTestTaskProxyLess", "websiteURL": PAGE,
          "gt": "022397c99c9f646f6477822485f30404", "challenge": "d9b3f1e5a7c2"}),
        ("image", "image",
         {"type": "ImageToTextTask", "body": base64.b64encode(PNG).decode(), "numeric": 1}),
        ("funcaptcha", "funcaptcha",
         {"type": "FunCaptchaTaskProxyLess", "websiteURL": PAGE,
          "websitePublicKey": "69A21A01-CC7B-B9C6-0F9A-E7FA06677FFC",
          "funcaptchaApiJSSubdomain": "client-api.arkoselabs.com", "data": '{"blob":"b10b"}'}),
        ("geetest_v4", "geetest_v4",
         {"type": "GeeTestTaskProxyLess", "websiteURL": PAGE,
          "captchaId": "e392e1d7fd421dc63325744d5a2b9c73"}),
        ("mtcaptcha", "mtcaptcha",
         {"type": "MtCaptchaTaskProxyLess", "websiteURL": PAGE,
          "websiteKey": "MTPublic-KzqLY1cKH"}),
        ("datadome", "datadome",
         {"type": "DatadomeSliderTask", "websiteURL": PAGE,
          "captchaUrl": "https://geo.captcha-delivery.com/captcha/?initialCid=x",
          "userAgent": "Mozilla/5.0 (capsolver test)", "proxy": proxy}),
        ("friendly_captcha", "friendly_captcha",
         {"type": "FriendlyCaptchaTaskProxyless", "websiteURL": PAGE,
          "websiteKey": "FCMGEMUD2KTDSQ5H"}),
    ]
    answer_of = {
        "recaptcha_v2": lambda s: s["gRecaptchaResponse"],
        "recaptcha_v3": lambda s: s["gRecaptchaResponse"],
        "turnstile": lambda s: s["token"],
        "cloudflare_challenge": lambda s: s["token"],
        "geetest_v3": lambda s: s,
        "image": lambda s: s["text"],
        "funcaptcha": lambda s: s["token"],
        "mtcaptcha": lambda s: s["token"],
        "geetest_v4": lambda s: s,
        "datadome": lambda s: s["cookie"],
        "friendly_captcha": lambda s: s["token"],
    }

    def solve(case, kind, task):
        solution = capsolver.solve(task)
        return {"case": case, "kind": kind, "answer": answer_of[kind](solution),
                "user_agent": solution.get("userAgent"), "task_id": None}

    # Every case at once, as a fleet's workers call the library (see run_anticaptcha).
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        results = list(pool.map(lambda c: solve(*c), cases))
    return results, {"balance": capsolver.balance()}


def run_anticaptcha_passthrough(base, key):
    """anticaptchaofficial's modules for task types the gateway does not declare, each with
    every setter the library has for it: they pass through to a `createTask` account as sent."""
    from anticaptchaofficial import antinetworking
    from anticaptchaofficial.altchaproxyless import altchaProxyless
    from anticaptchaofficial.amazonproxyless import amazonProxyless
    from anticaptchaofficial.prosopoproxyless import prosopoProxyless

    antinetworking.session.mount(ANTI_CAPTCHA, ToGateway(base))
    results = []
    amazon = page(amazonProxyless(), "AQIDAHjcYu/GjX+QlghicBgQ/7bFaQZ+m5FKCMDnO+vTp")
    amazon.set_iv("CgAHbCe2GgAAAAAj")
    amazon.set_context("9BUgmlm48F92WUoqv97a49ZuEJJ50TCk9MVr3C7WMtQ0X6flVbufM4n8")
    amazon.set_captcha_script("https://k.token.awswaf.com/k/captcha.js")
    amazon.set_challenge_script("https://k.token.awswaf.com/k/challenge.js")
    altcha = altchaProxyless()
    altcha.set_website_url(PAGE)
    altcha.set_challenge_url("https://example.com/altcha/challenge")
    with ThreadPoolExecutor(max_workers=3) as pool:
        cases = [
            pool.submit(anti_solve, results, key, "amazon", "other", amazon),
            pool.submit(anti_solve, results, key, "prosopo", "other",
                        page(prosopoProxyless(), "5EZVvsHMrKCFKp5NYNoTyDjTjetoVo1Z4UNNbTwJf1GfN6Xm")),
            pool.submit(anti_solve, results, key, "altcha", "other", altcha),
        ]
        # A case that failed raises here, with its message.
        [case.result() for case in cases]
    return results, {}


def main():
    client, base, key = sys.argv[1], sys.argv[2].rstrip("/"), sys.argv[3]
    run = {"anticaptcha": run_anticaptcha, "capsolver": run_capsolver,
           "anticaptcha_passthrough": run_anticaptcha_passthrough}[client]
    results, extras = run(base, key)
    print(json.dumps({"results": results, "extras": extras}, default=str))


if __name__ == "__main__":
    main()
