"""Drive the two strict JSON-task clients from PyPI against a running gateway and print what
they received. Both build their reply objects from exactly the fields their provider documents
(msgspec structs) and fail on any other, so a reply in another provider's shape breaks them:

- `python3-capsolver` (CapSolver): any key beyond errorId, errorCode, errorDescription, taskId,
  status and solution is a TypeError;
- `python3-anticaptcha` (anti-captcha): a `status` in the createTask reply, or a `taskId` in a
  getTaskResult reply, is a TypeError.

Usage: strict_clients.py capsolver|anticaptcha GATEWAY_URL KEY

Prints one JSON object: {"results": [{"case", "kind", "answer"}...]}. The calling Rust test
(tests/it/taskapi/strict.rs) verifies each token once at the simulator.

Base URLs: `python3-capsolver` takes `request_url`. `python3-anticaptcha` joins every URL onto
its module constant `BASE_REQUEST_URL`; the script sets that constant in the module that reads
it, which is the one change a user pointing it elsewhere makes. Both libraries build every body
and read every answer themselves.
"""

import base64
import json
import sys

PAGE = "https://example.com/login"
# The simulator's GeeTest v4 answers echo the site's `captcha_id`.
GEETEST_V4_ID = "e392e1d7fd421dc63325744d5a2b9c73"
# A real 1x1 PNG padded to a plausible captcha size: the gateway checks magic bytes and size.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
) + b"\x00" * 200


def answer_of(case, kind, reply):
    """The answer in a library's final reply; exits naming the case when there is none."""
    if reply.get("errorId") != 0 or reply.get("status") != "ready":
        sys.exit(f"{case}: not solved: {reply}")
    solution = reply.get("solution") or {}
    if kind in ("geetest_v4", "coordinates"):
        # An object answer: the caller reads it whole.
        return {"case": case, "kind": kind, "answer": solution}
    answer = (solution.get("gRecaptchaResponse") or solution.get("token")
              or solution.get("text") or solution.get("cookie"))
    if not answer:
        sys.exit(f"{case}: no answer in {solution}")
    return {"case": case, "kind": kind, "answer": answer}


def run_capsolver(base, key):
    from python3_capsolver.cloudflare import Cloudflare
    from python3_capsolver.core.enum import CaptchaTypeEnm
    from python3_capsolver.datadome_slider import DatadomeSlider
    from python3_capsolver.friendly_captcha import FriendlyCaptcha
    from python3_capsolver.gee_test import GeeTest
    from python3_capsolver.image_to_text import ImageToText
    from python3_capsolver.mt_captcha import MtCaptcha
    from python3_capsolver.recaptcha import ReCaptcha

    options = dict(api_key=key, request_url=base + "/", sleep_time=1)
    results = []
    reply = ReCaptcha(captcha_type=CaptchaTypeEnm.ReCaptchaV2TaskProxyLess, **options).captcha_handler(
        task_payload={"websiteURL": PAGE, "websiteKey": "6Le-strict-capsolver-v2"}
    )
    results.append(answer_of("recaptcha_v2", "recaptcha_v2", reply))
    reply = Cloudflare(captcha_type=CaptchaTypeEnm.AntiTurnstileTaskProxyLess, **options).captcha_handler(
        task_payload={"websiteURL": PAGE, "websiteKey": "0x4-strict-capsolver"}
    )
    results.append(answer_of("turnstile", "turnstile", reply))
    reply = ImageToText(**options).captcha_handler(
        task_payload={"body": base64.b64encode(PNG).decode()}
    )
    results.append(answer_of("image", "image", reply))
    # The declared kinds the library has a class for.
    reply = GeeTest(captcha_type=CaptchaTypeEnm.GeeTestTaskProxyLess, **options).captcha_handler(
        task_payload={"websiteURL": PAGE, "captchaId": GEETEST_V4_ID}
    )
    results.append(answer_of("geetest_v4", "geetest_v4", reply))
    reply = MtCaptcha(captcha_type=CaptchaTypeEnm.MtCaptchaTaskProxyLess, **options).captcha_handler(
        task_payload={"websiteURL": PAGE, "websiteKey": "MTPublic-strict-capsolver"}
    )
    results.append(answer_of("mtcaptcha", "mtcaptcha", reply))
    reply = FriendlyCaptcha(**options).captcha_handler(
        task_payload={"websiteURL": PAGE, "websiteKey": "FCMG-strict-capsolver"}
    )
    results.append(answer_of("friendly_captcha", "friendly_captcha", reply))
    reply = DatadomeSlider(**options).captcha_handler(
        task_payload={
            "websiteURL": PAGE,
            "captchaUrl": "https://geo.captcha-delivery.com/captcha/?initialCid=strict",
            "userAgent": "Mozilla/5.0 (strict capsolver)",
            "proxy": "http:127.0.0.1:3128:user:secret",
        }
    )
    results.append(answer_of("datadome", "datadome", reply))
    return results


def run_anticaptcha(base, key):
    import python3_anticaptcha.core.sio_captcha_instrument as instrument
    from python3_anticaptcha.friendly_captcha import FriendlyCaptcha
    from python3_anticaptcha.fun_captcha import FunCaptcha
    from python3_anticaptcha.gee_test import GeeTest
    from python3_anticaptcha.image_to_coordinates import ImageToCoordinates
    from python3_anticaptcha.recaptcha_v2 import ReCaptchaV2
    from python3_anticaptcha.recaptcha_v3 import ReCaptchaV3
    from python3_anticaptcha.turnstile import Turnstile

    instrument.BASE_REQUEST_URL = base + "/"
    results = []
    reply = ReCaptchaV2(
        api_key=key,
        captcha_type="RecaptchaV2TaskProxyless",
        websiteURL=PAGE,
        websiteKey="6Le-strict-anticaptcha-v2",
        sleep_time=1,
    ).captcha_handler()
    results.append(answer_of("recaptcha_v2", "recaptcha_v2", reply))
    reply = Turnstile(
        api_key=key,
        captcha_type="TurnstileTaskProxyless",
        websiteURL=PAGE,
        websiteKey="0x4-strict-anticaptcha",
        sleep_time=1,
    ).captcha_handler()
    results.append(answer_of("turnstile", "turnstile", reply))
    # The other kinds the library has a class for, each with its documented fields.
    reply = ReCaptchaV3(
        api_key=key,
        websiteURL=PAGE,
        websiteKey="6Le-strict-anticaptcha-v3",
        minScore=0.3,
        pageAction="login",
        sleep_time=1,
    ).captcha_handler()
    results.append(answer_of("recaptcha_v3", "recaptcha_v3", reply))
    reply = FunCaptcha(
        api_key=key,
        captcha_type="FunCaptchaTaskProxyless",
        websiteURL=PAGE,
        websitePublicKey="69A21A01-CC7B-B9C6-0F9A-E7FA0strict",
        funcaptchaApiJSSubdomain="client-api.arkoselabs.com",
        data='{"blob":"b10b-strict"}',
        sleep_time=1,
    ).captcha_handler()
    results.append(answer_of("funcaptcha", "funcaptcha", reply))
    reply = GeeTest(
        api_key=key,
        captcha_type="GeeTestTaskProxyless",
        websiteURL=PAGE,
        gt=GEETEST_V4_ID,
        version=4,
        sleep_time=1,
    ).captcha_handler()
    results.append(answer_of("geetest_v4", "geetest_v4", reply))
    reply = FriendlyCaptcha(
        api_key=key,
        websiteURL=PAGE,
        websiteKey="FCMG-strict-anticaptcha",
        sleep_time=1,
    ).captcha_handler()
    results.append(answer_of("friendly_captcha", "friendly_captcha", reply))
    reply = ImageToCoordinates(
        api_key=key,
        comment="click the cats",
        mode="points",
        websiteURL=PAGE,
        sleep_time=1,
    ).captcha_handler(captcha_base64=PNG)
    results.append(answer_of("coordinates", "coordinates", reply))
    return results


def main():
    which, base, key = sys.argv[1], sys.argv[2].rstrip("/"), sys.argv[3]
    runs = {"capsolver": run_capsolver, "anticaptcha": run_anticaptcha}
    print(json.dumps({"results": runs[which](base, key)}))


if __name__ == "__main__":
    main()
