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
# A real 1x1 PNG padded to a plausible captcha size: the gateway checks magic bytes and size.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
) + b"\x00" * 200


def answer_of(case, kind, reply):
    """The answer in a library's final reply; exits naming the case when there is none."""
    if reply.get("errorId") != 0 or reply.get("status") != "ready":
        sys.exit(f"{case}: not solved: {reply}")
    solution = reply.get("solution") or {}
    answer = solution.get("gRecaptchaResponse") or solution.get("token") or solution.get("text")
    if not answer:
        sys.exit(f"{case}: no answer in {solution}")
    return {"case": case, "kind": kind, "answer": answer}


def run_capsolver(base, key):
    from python3_capsolver.cloudflare import Cloudflare
    from python3_capsolver.core.enum import CaptchaTypeEnm
    from python3_capsolver.image_to_text import ImageToText
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
    return results


def run_anticaptcha(base, key):
    import python3_anticaptcha.core.sio_captcha_instrument as instrument
    from python3_anticaptcha.recaptcha_v2 import ReCaptchaV2
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
    return results


def main():
    which, base, key = sys.argv[1], sys.argv[2].rstrip("/"), sys.argv[3]
    runs = {"capsolver": run_capsolver, "anticaptcha": run_anticaptcha}
    print(json.dumps({"results": runs[which](base, key)}))


if __name__ == "__main__":
    main()
