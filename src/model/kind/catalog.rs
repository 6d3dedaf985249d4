//! Every task type the gateway declares, one entry each: its names in every dialect, which
//! providers solve it, how its answers may be handed out, how long they live and when a first
//! poll is worth making, each figure with its source. docs/API.md ("Task types") shows the
//! table.

use super::Reuse;
use super::spec::{
    AnswerShape, Check, Dialect, Dialects, IdForm, IdPart, Identity, MAX_COUNT, MAX_TEXT_LEN,
    MAX_WORD_LEN, PAGE, Param, Parameters, ProxyName, SITEKEY, TYPICAL_TOKEN, TaskName, TypeSpec,
    Typical, secs,
};

use ProxyName::{Either, Proxied, Proxyless};

const ANTI: Dialects = Dialects::ANTI_NAMES;
const CAPSOLVER: Dialects = Dialects::CAPSOLVER;
/// Every `createTask` dialect.
const TASK_APIS: Dialects = Dialects::of(&[
    Dialect::AntiCaptcha,
    Dialect::CapSolver,
    Dialect::TwoCaptchaV2,
]);

/// A token `createTask` solutions carry as `token`.
const TOKEN: AnswerShape = AnswerShape::Token {
    fields: &["token"],
    extras: &[],
};
/// reCAPTCHA's token: `gRecaptchaResponse`, and `token` for CapSolver's clients.
const TOKEN_G: AnswerShape = AnswerShape::Token {
    fields: &["gRecaptchaResponse", "token"],
    extras: &[],
};
const TEXT_ANSWER: AnswerShape = AnswerShape::Token {
    fields: &["text"],
    extras: &[],
};

/// The official CaptchaAI SDK's first waits (`captchaai/core/registry.py`): 15 s for reCAPTCHA
/// v2, the Cloudflare challenge and GeeTest, 10 s for v3 and Turnstile, 1 s for images.
const SDK_FIRST_WAIT: &str = "the official CaptchaAI SDK's first wait for the type";
/// Google's siteverify documentation: a token is "valid for two minutes" and verified once.
const RECAPTCHA_LIFETIME: &str = "Google reCAPTCHA docs: a token is valid for two minutes, once";

pub const RECAPTCHA_V2: TypeSpec = TypeSpec {
    name: "recaptcha_v2",
    methods: &["userrecaptcha"],
    inphp_flag: None,
    task_names: &[
        TaskName::new("RecaptchaV2TaskProxyless", Proxyless, ANTI),
        TaskName::new("RecaptchaV2Task", Proxied, ANTI),
        TaskName::new("RecaptchaV2EnterpriseTaskProxyless", Proxyless, ANTI).enterprise(),
        TaskName::new("RecaptchaV2EnterpriseTask", Proxied, ANTI).enterprise(),
        TaskName::new("ReCaptchaV2TaskProxyLess", Proxyless, CAPSOLVER),
        TaskName::new("ReCaptchaV2Task", Proxied, CAPSOLVER),
        TaskName::new("ReCaptchaV2EnterpriseTaskProxyLess", Proxyless, CAPSOLVER).enterprise(),
        TaskName::new("ReCaptchaV2EnterpriseTask", Proxied, CAPSOLVER).enterprise(),
        // anti-captcha's legacy names, still sent by older clients.
        TaskName::new("NoCaptchaTaskProxyless", Proxyless, Dialects::NONE),
        TaskName::new("NoCaptchaTask", Proxied, Dialects::NONE),
    ],
    inphp: Dialects::INPHP,
    reuse: Reuse::SingleUse { poolable: true },
    lifetime: secs(120, RECAPTCHA_LIFETIME),
    first_poll: secs(15, SDK_FIRST_WAIT),
    params: Parameters::Typed,
    answer: TOKEN_G,
    // Enterprise answers carry one too; `SolveRequest::answer_has_user_agent` says which.
    answer_user_agent: false,
    needs_proxy: false,
    needs_user_agent: false,
    task_version: None,
    identity: Identity::Declared,
    inphp_result: true,
    typical: TYPICAL_TOKEN,
};

pub const RECAPTCHA_V3: TypeSpec = TypeSpec {
    name: "recaptcha_v3",
    // `userrecaptcha` with `version=v3`.
    methods: &["userrecaptcha"],
    inphp_flag: None,
    task_names: &[
        TaskName::new("RecaptchaV3TaskProxyless", Proxyless, ANTI).with_or_without_enterprise(),
        TaskName::new("RecaptchaV3Task", Proxied, ANTI).with_or_without_enterprise(),
        TaskName::new("ReCaptchaV3TaskProxyLess", Proxyless, CAPSOLVER),
        TaskName::new("ReCaptchaV3Task", Proxied, CAPSOLVER),
        TaskName::new("ReCaptchaV3EnterpriseTaskProxyLess", Proxyless, CAPSOLVER).enterprise(),
        TaskName::new("ReCaptchaV3EnterpriseTask", Proxied, CAPSOLVER).enterprise(),
    ],
    inphp: Dialects::INPHP,
    reuse: Reuse::SingleUse { poolable: true },
    lifetime: secs(120, RECAPTCHA_LIFETIME),
    first_poll: secs(10, SDK_FIRST_WAIT),
    params: Parameters::Typed,
    answer: TOKEN_G,
    // Enterprise answers carry one too; `SolveRequest::answer_has_user_agent` says which.
    answer_user_agent: false,
    needs_proxy: false,
    needs_user_agent: false,
    task_version: None,
    identity: Identity::Declared,
    inphp_result: true,
    typical: Typical {
        solve_ms: (1_000, 3_000),
        ..TYPICAL_TOKEN
    },
};

pub const TURNSTILE: TypeSpec = TypeSpec {
    name: "turnstile",
    methods: &["turnstile"],
    inphp_flag: None,
    task_names: &[
        TaskName::new("TurnstileTaskProxyless", Proxyless, ANTI),
        TaskName::new("TurnstileTask", Proxied, ANTI),
        TaskName::new("AntiTurnstileTaskProxyLess", Either, CAPSOLVER),
    ],
    inphp: Dialects::INPHP,
    reuse: Reuse::SingleUse { poolable: true },
    lifetime: secs(
        300,
        "Cloudflare Turnstile docs: a token is valid for 300 seconds, once",
    ),
    first_poll: secs(10, SDK_FIRST_WAIT),
    params: Parameters::Declared(&[
        SITEKEY.aliases(&["googlekey"]),
        PAGE,
        // The widget's `data-action`, `data-cdata` and, on a challenge page, `chlPageData`;
        // CapSolver carries the first two in `metadata` (its Turnstile docs) and documents no
        // field for the third, 2captcha v2 the last two as `data` and `pagedata` (as its
        // callers send them).
        Param::optional("action", "action", Check::Text)
            .capsolver("metadata.action")
            .longest(MAX_WORD_LEN),
        Param::optional("data", "cData", Check::Text)
            .capsolver("metadata.cdata")
            .twocaptcha_v2("data"),
        Param::optional("pagedata", "chlPageData", Check::Text)
            .twocaptcha_v2("pagedata")
            .only(Dialects::INPHP.union(ANTI))
            .per_load(),
    ]),
    answer: TOKEN,
    answer_user_agent: false,
    needs_proxy: false,
    needs_user_agent: false,
    task_version: None,
    // As its ids were first computed, when its parameters had fields of their own.
    identity: Identity::Parts(&[
        IdPart::new("sitekey", "sitekey", IdForm::Text),
        IdPart::new("page", "pageurl", IdForm::Page),
        IdPart::new("action", "action", IdForm::Text),
        IdPart::new("data", "data", IdForm::Text),
        IdPart::new("pagedata", "pagedata", IdForm::Text),
    ]),
    inphp_result: false,
    typical: Typical {
        solve_ms: (1_000, 3_000),
        price: "0.00145",
        ..TYPICAL_TOKEN
    },
};

pub const CLOUDFLARE_CHALLENGE: TypeSpec = TypeSpec {
    name: "cloudflare_challenge",
    methods: &["cloudflare_challenge"],
    inphp_flag: None,
    task_names: &[
        // anti-captcha asks for `cf_clearance` through its Turnstile type with
        // `cloudflareTaskType`, and always with the caller's proxy.
        TaskName::new("TurnstileTask", Proxied, ANTI).marked("cloudflareTaskType", "cf_clearance"),
        TaskName::new("AntiCloudflareTask", Proxied, CAPSOLVER),
    ],
    inphp: Dialects::INPHP,
    reuse: Reuse::Reusable,
    lifetime: secs(
        15 * 60,
        "Cloudflare docs: the clearance lifetime is a site setting, 15-45 min recommended; the short end",
    ),
    first_poll: secs(15, SDK_FIRST_WAIT),
    params: Parameters::Declared(&[PAGE, Param::optional("sitekey", "websiteKey", Check::Key)]),
    answer: AnswerShape::Token {
        // CapSolver's solution carries it in `cookies`.
        fields: &["cf_clearance", "cookies.cf_clearance", "token"],
        extras: &[],
    },
    answer_user_agent: true,
    needs_proxy: true,
    needs_user_agent: false,
    task_version: None,
    // As its ids were first computed: a clearance is the whole host's, whatever the page.
    identity: Identity::Parts(&[IdPart::new("host", "pageurl", IdForm::Host)]),
    inphp_result: true,
    typical: Typical {
        solve_ms: (3_000, 6_000),
        price: "0.00145",
        ..TYPICAL_TOKEN
    },
};

pub const GEETEST_V3: TypeSpec = TypeSpec {
    name: "geetest_v3",
    methods: &["geetest"],
    inphp_flag: None,
    task_names: &[
        TaskName::new("GeeTestTaskProxyless", Proxyless, ANTI),
        TaskName::new("GeeTestTask", Proxied, ANTI),
        TaskName::new("GeeTestTaskProxyLess", Proxyless, CAPSOLVER),
    ],
    inphp: Dialects::INPHP,
    // The challenge is fresh per page load: an answer is for that load only.
    reuse: Reuse::SingleUse { poolable: false },
    lifetime: secs(
        120,
        "not documented by GeeTest; the reCAPTCHA figure is the cautious guess",
    ),
    first_poll: secs(15, SDK_FIRST_WAIT),
    params: Parameters::Declared(&[
        Param::required("gt", "gt", Check::Key),
        Param::required("challenge", "challenge", Check::Key),
        PAGE,
        Param::optional("api_server", "geetestApiServerSubdomain", Check::Text)
            .aliases(&["apiServer"]),
        // 2captcha's `initGeetest` options, for the rare page that sets them.
        Param::only_in("offline", Check::Flag, TWOCAPTCHA),
        Param::only_in("new_captcha", Check::Flag, TWOCAPTCHA),
        // anti-captcha's: where the page loads GeeTest's library from, as JSON text ("required
        // for some sites").
        Param::optional("geetestGetLib", "geetestGetLib", Check::Text).only(ANTI_ONLY),
    ]),
    // 2captcha answers with `geetest_`-prefixed keys, CaptchaAI's SDK and `createTask` without.
    // `validate` first: it is the part a site verifies (the simulator's token).
    answer: AnswerShape::Object {
        keys: &["validate", "challenge", "seccode"],
        also: &[
            ("geetest_challenge", "challenge"),
            ("geetest_validate", "validate"),
            ("geetest_seccode", "seccode"),
        ],
    },
    answer_user_agent: false,
    needs_proxy: false,
    needs_user_agent: false,
    // anti-captcha and 2captcha v2 share these names with v4, told apart by `version`.
    task_version: Some(3),
    identity: Identity::Declared,
    inphp_result: false,
    typical: TYPICAL_TOKEN,
};

/// Where an image's `numeric` 3 ("only digits or only letters") and 4 ("digits and letters
/// both") are documented: 2captcha's `in.php` and v2 `ImageToTextTask`, and CaptchaAI's
/// `in.php`, which follows 2captcha's. anti-captcha's `numeric` has 0-2 (any, digits, no digits).
const NUMERIC_ALL: Dialects = Dialects::INPHP.union(TWOCAPTCHA_V2);

/// The workers' language: 2captcha's `in.php` `lang` (a language code); anti-captcha's and
/// 2captcha v2's `languagePool`, a field of the `createTask` request beside the task ("en", and
/// anti-captcha's "rn" for its Russian-speaking group), for images and questions alone.
/// CapSolver documents none.
const LANGUAGE_POOL: Param = Param::optional("lang", "languagePool", Check::Text)
    .longest(MAX_WORD_LEN)
    .beside_task()
    .only(Dialects::INPHP.union(ANTI));

pub const IMAGE: TypeSpec = TypeSpec {
    name: "image",
    // A flag or parameter of another kind's on these methods makes that kind (`coordinatescaptcha`,
    // `textcaptcha`); without one they are an image's text.
    methods: &["base64", "post"],
    inphp_flag: None,
    task_names: &[TaskName::new("ImageToTextTask", Either, TASK_APIS)],
    inphp: Dialects::INPHP,
    reuse: Reuse::Reusable,
    lifetime: secs(
        60 * 60,
        "the same image has the same text: how long the coalescing cache keeps an answer",
    ),
    first_poll: secs(1, SDK_FIRST_WAIT),
    // 2captcha's and CaptchaAI's `in.php` names; anti-captcha's `ImageToTextTask` fields.
    params: Parameters::Declared(&[
        // `file` is `method=post`'s upload.
        Param::required("body", "body", Check::Image).aliases(&["file"]),
        // "at least two words".
        Param::optional("phrase", "phrase", Check::Flag),
        // The official captchaai SDK sends `caseSensitive`.
        Param::optional("regsense", "case", Check::Flag)
            .aliases(&["caseSensitive"])
            .also_sent_as("caseSensitive"),
        // 1 digits only, 2 letters only, 3 either alone, 4 both.
        Param::optional("numeric", "numeric", Check::Count(4)).above(2, NUMERIC_ALL),
        // The answer is the sum the image asks for.
        Param::optional("calc", "math", Check::Flag),
        // 2captcha: 1 to 20.
        Param::optional("min_len", "minLength", Check::Count(20))
            .aliases(&["minLen"])
            .not_above("max_len"),
        Param::optional("max_len", "maxLength", Check::Count(20)).aliases(&["maxLen"]),
        // 1 Cyrillic, 2 Latin: `in.php`'s alone.
        Param::only_in("language", Check::Count(2), Dialects::INPHP),
        LANGUAGE_POOL,
        Param::optional("textinstructions", "comment", Check::Text)
            .aliases(&["instructions"])
            .longest(MAX_TEXT_LEN),
    ]),
    answer: TEXT_ANSWER,
    answer_user_agent: false,
    needs_proxy: false,
    needs_user_agent: false,
    task_version: None,
    identity: Identity::Computed(image_identity),
    inphp_result: false,
    typical: Typical {
        solve_ms: (500, 1_000),
        price: "0.0005",
        token: false,
    },
};

/// An image's target identity as its ids were first computed, when its hints were typed
/// fields: the picture's digest, then every hint in one text (the typed fields' debug form).
fn image_identity(values: &[(&'static str, String)], part: &mut dyn FnMut(&str, &str)) {
    use sha2::{Digest, Sha256};
    let value = |name: &str| {
        values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    };
    let flag = |name: &str| value(name).is_some();
    let number = |name: &str| value(name).and_then(|v| v.parse::<u32>().ok());
    // `validate` checked the base64 before any target is made.
    let picture = value("body")
        .and_then(crate::model::decode_base64_image)
        .unwrap_or_default();
    part("image", &hex::encode(Sha256::digest(&picture)));
    let hints = format!(
        "ImageOptions {{ phrase: {}, case_sensitive: {}, numeric: {}, calc: {}, min_len: {:?}, \
         max_len: {:?}, language: {:?}, lang: {:?}, instructions: {:?} }}",
        flag("phrase"),
        flag("regsense"),
        number("numeric").unwrap_or(0),
        flag("calc"),
        number("min_len"),
        number("max_len"),
        number("language"),
        value("lang"),
        value("textinstructions"),
    );
    part("options", &hints);
}

pub const TEXT: TypeSpec = TypeSpec {
    name: "text",
    // The question as `textcaptcha=`, with `method=post` (2captcha-python's, and what the
    // gateway sends), `method=textcaptcha`, or no method (unicaps, the npm client).
    methods: &["post", "textcaptcha"],
    inphp_flag: Some("textcaptcha"),
    // 2captcha v2's; anti-captcha and CapSolver ask no text questions.
    task_names: &[TaskName::new(
        "TextCaptchaTask",
        Either,
        Dialects::of(&[Dialect::TwoCaptchaV2]),
    )],
    inphp: Dialects::INPHP,
    reuse: Reuse::Reusable,
    lifetime: secs(
        60 * 60,
        "the same question has the same answer: how long the coalescing cache keeps one",
    ),
    first_poll: secs(
        1,
        "an answer to a text question is typed as quickly as an image's",
    ),
    params: Parameters::Declared(&[
        // `text` is the native API's name for it.
        Param::required("textcaptcha", "comment", Check::Text)
            .aliases(&["text"])
            .longest(MAX_TEXT_LEN),
        LANGUAGE_POOL,
    ]),
    answer: TEXT_ANSWER,
    answer_user_agent: false,
    needs_proxy: false,
    needs_user_agent: false,
    task_version: None,
    // As its ids were first computed, when its parameters had fields of their own.
    identity: Identity::Parts(&[
        IdPart::new("text", "textcaptcha", IdForm::Text),
        IdPart::new("lang", "lang", IdForm::Text),
    ]),
    inphp_result: false,
    typical: Typical {
        solve_ms: (300, 800),
        price: "0.0005",
        token: false,
    },
};

/// The declarations below name 2captcha's in.php methods as its own client sends them
/// (2captcha-python 2.1.2, `twocaptcha/solver.py`), and the createTask types and fields as
/// anticaptchaofficial 1.0.72, capsolver 1.0.7 and python3-capsolver 1.2.2 send them.
const TWOCAPTCHA: Dialects = Dialects::of(&[Dialect::TwoCaptcha]);
const CAPTCHAAI: Dialects = Dialects::of(&[Dialect::CaptchaAi]);
const TWOCAPTCHA_V2: Dialects = Dialects::of(&[Dialect::TwoCaptchaV2]);
/// Where no vendor documents how long an answer lives: the shortest documented token lifetime
/// (reCAPTCHA's two minutes), so no answer is handed out after it could have died. An
/// operator who knows better sets `[lifetimes] <name> = <seconds>`.
const UNDOCUMENTED_LIFETIME: &str = "not documented by the vendor; the shortest documented token lifetime (reCAPTCHA's), the cautious guess";
/// Token types without a documented first wait: reCAPTCHA v2's.
const TOKEN_FIRST_WAIT: &str = "no documented first wait; reCAPTCHA v2's, the usual for a token";

pub const HCAPTCHA: TypeSpec = TypeSpec {
    name: "hcaptcha",
    methods: &["hcaptcha"],
    inphp_flag: None,
    task_names: &[
        TaskName::new("HCaptchaTaskProxyless", Proxyless, ANTI),
        TaskName::new("HCaptchaTask", Proxied, ANTI),
        TaskName::new("HCaptchaTaskProxyLess", Proxyless, CAPSOLVER),
        TaskName::new("HCaptchaTask", Proxied, CAPSOLVER),
    ],
    inphp: TWOCAPTCHA,
    reuse: Reuse::SingleUse { poolable: true },
    lifetime: secs(
        120,
        "hCaptcha docs: a response token expires after 120 seconds and is verified once",
    ),
    first_poll: secs(
        20,
        "2captcha's docs: the first result request 20 s after an hCaptcha",
    ),
    params: Parameters::Declared(&[
        SITEKEY,
        PAGE,
        Param::optional("invisible", "isInvisible", Check::Flag),
        // The site's `rqdata` (2captcha's `data`), inside `createTask`'s `enterprisePayload`:
        // fresh with each load of the page, where the site uses it.
        Param::optional("data", "enterprisePayload.rqdata", Check::Text).per_load(),
        // `hcaptcha.com` or `js.hcaptcha.com`: 2captcha's alone; `createTask` has no field for it.
        Param::only_in("domain", Check::Key, TWOCAPTCHA),
    ]),
    // anti-captcha's and 2captcha's answers may carry `respKey` (`hcaptcha.getRespKey()`),
    // which some sites check beside the token; anticaptchaofficial's `get_respkey()` reads it.
    answer: AnswerShape::Token {
        fields: &["gRecaptchaResponse", "token"],
        extras: &["respKey"],
    },
    answer_user_agent: true,
    needs_proxy: false,
    needs_user_agent: false,
    task_version: None,
    identity: Identity::Declared,
    inphp_result: false,
    typical: TYPICAL_TOKEN,
};

pub const FUNCAPTCHA: TypeSpec = TypeSpec {
    name: "funcaptcha",
    methods: &["funcaptcha"],
    inphp_flag: None,
    task_names: &[
        TaskName::new("FunCaptchaTaskProxyless", Proxyless, ANTI),
        TaskName::new("FunCaptchaTask", Proxied, ANTI),
        TaskName::new("FunCaptchaTaskProxyLess", Proxyless, CAPSOLVER),
    ],
    inphp: TWOCAPTCHA,
    reuse: Reuse::SingleUse { poolable: true },
    lifetime: secs(120, UNDOCUMENTED_LIFETIME),
    first_poll: secs(15, TOKEN_FIRST_WAIT),
    params: Parameters::Declared(&[
        Param::required("publickey", "websitePublicKey", Check::Key).aliases(&["sitekey"]),
        PAGE,
        Param::optional("surl", "funcaptchaApiJSSubdomain", Check::Text),
        Param::optional("data", "data", Check::Object),
        // Solve with JavaScript off in the worker's browser: 2captcha's alone.
        Param::only_in("nojs", Check::Flag, TWOCAPTCHA),
    ]),
    answer: TOKEN,
    answer_user_agent: false,
    needs_proxy: false,
    needs_user_agent: false,
    task_version: None,
    identity: Identity::Declared,
    inphp_result: false,
    typical: TYPICAL_TOKEN,
};

pub const MTCAPTCHA: TypeSpec = TypeSpec {
    name: "mtcaptcha",
    methods: &["mt_captcha"],
    inphp_flag: None,
    task_names: &[
        TaskName::new("MtCaptchaTaskProxyless", Proxyless, TWOCAPTCHA_V2),
        TaskName::new("MtCaptchaTask", Proxied, TWOCAPTCHA_V2),
        TaskName::new("MtCaptchaTaskProxyLess", Proxyless, CAPSOLVER),
        TaskName::new("MtCaptchaTask", Proxied, CAPSOLVER),
    ],
    inphp: TWOCAPTCHA,
    reuse: Reuse::SingleUse { poolable: true },
    lifetime: secs(120, UNDOCUMENTED_LIFETIME),
    first_poll: secs(15, TOKEN_FIRST_WAIT),
    params: Parameters::Declared(&[SITEKEY, PAGE]),
    answer: TOKEN,
    answer_user_agent: false,
    needs_proxy: false,
    needs_user_agent: false,
    task_version: None,
    identity: Identity::Declared,
    inphp_result: false,
    typical: TYPICAL_TOKEN,
};

pub const FRIENDLY_CAPTCHA: TypeSpec = TypeSpec {
    name: "friendly_captcha",
    methods: &["friendly_captcha"],
    inphp_flag: None,
    task_names: &[
        // CapSolver documents the proxyless name as anti-captcha spells it.
        TaskName::new(
            "FriendlyCaptchaTaskProxyless",
            Proxyless,
            ANTI.union(CAPSOLVER),
        ),
        TaskName::new("FriendlyCaptchaTask", Proxied, ANTI),
    ],
    inphp: Dialects::INPHP,
    reuse: Reuse::SingleUse { poolable: true },
    lifetime: secs(120, UNDOCUMENTED_LIFETIME),
    first_poll: secs(10, SDK_FIRST_WAIT),
    params: Parameters::Declared(&[
        SITEKEY,
        PAGE,
        // `v1` or `v2`: CaptchaAI's alone (its SDK's `version`).
        Param::only_in("version", Check::Key, CAPTCHAAI),
    ]),
    answer: TOKEN,
    answer_user_agent: false,
    needs_proxy: false,
    needs_user_agent: false,
    task_version: None,
    identity: Identity::Declared,
    inphp_result: false,
    typical: TYPICAL_TOKEN,
};

pub const LEMIN: TypeSpec = TypeSpec {
    name: "lemin",
    methods: &["lemin"],
    inphp_flag: None,
    task_names: &[
        TaskName::new("LeminTaskProxyless", Proxyless, TWOCAPTCHA_V2),
        TaskName::new("LeminTask", Proxied, TWOCAPTCHA_V2),
    ],
    inphp: Dialects::INPHP,
    reuse: Reuse::SingleUse { poolable: true },
    lifetime: secs(120, UNDOCUMENTED_LIFETIME),
    first_poll: secs(10, SDK_FIRST_WAIT),
    params: Parameters::Declared(&[
        Param::required("captcha_id", "captchaId", Check::Key),
        Param::required("div_id", "divId", Check::Text),
        PAGE,
        Param::optional("api_server", "leminApiServerSubdomain", Check::Text)
            .aliases(&["apiServer"]),
    ]),
    // CaptchaAI (and its SDK) name the second key `challenge_uuid`.
    answer: AnswerShape::Object {
        keys: &["answer", "challenge_id"],
        also: &[("challenge_uuid", "challenge_id")],
    },
    answer_user_agent: false,
    needs_proxy: false,
    needs_user_agent: false,
    task_version: None,
    identity: Identity::Declared,
    inphp_result: false,
    typical: TYPICAL_TOKEN,
};

pub const DATADOME: TypeSpec = TypeSpec {
    name: "datadome",
    methods: &["datadome"],
    inphp_flag: None,
    task_names: &[
        TaskName::new("DataDomeSliderTask", Proxied, TWOCAPTCHA_V2),
        TaskName::new("DatadomeSliderTask", Proxied, CAPSOLVER),
    ],
    inphp: TWOCAPTCHA,
    // The cookie is bound to the proxy and browser that earned it; one caller's only.
    reuse: Reuse::SingleUse { poolable: false },
    lifetime: secs(120, UNDOCUMENTED_LIFETIME),
    first_poll: secs(15, TOKEN_FIRST_WAIT),
    params: Parameters::Declared(&[
        Param::required("captcha_url", "captchaUrl", Check::Page),
        PAGE,
    ]),
    answer: AnswerShape::Token {
        fields: &["cookie"],
        extras: &[],
    },
    answer_user_agent: false,
    needs_proxy: true,
    needs_user_agent: true,
    task_version: None,
    identity: Identity::Declared,
    inphp_result: false,
    typical: TYPICAL_TOKEN,
};

pub const GEETEST_V4: TypeSpec = TypeSpec {
    name: "geetest_v4",
    methods: &["geetest_v4"],
    inphp_flag: None,
    // anti-captcha's and 2captcha v2's names are v3's, with `version: 4` (`task_version`);
    // CapSolver's is v3's too, with `captchaId` in place of `gt` and `challenge`.
    task_names: &[
        TaskName::new("GeeTestTaskProxyless", Proxyless, ANTI),
        TaskName::new("GeeTestTask", Proxied, ANTI),
        TaskName::new("GeeTestTaskProxyLess", Proxyless, CAPSOLVER),
    ],
    inphp: TWOCAPTCHA,
    // No challenge per page load: the site's `captcha_id` is fixed, so spare answers may wait.
    reuse: Reuse::SingleUse { poolable: true },
    lifetime: secs(120, UNDOCUMENTED_LIFETIME),
    first_poll: secs(15, SDK_FIRST_WAIT),
    params: Parameters::Declared(&[
        // 2captcha v2 carries it in `initParameters`, as the page's `initGeetest4` call does.
        Param::required("captcha_id", "gt", Check::Key)
            .twocaptcha_v2("initParameters.captcha_id")
            .capsolver("captchaId"),
        PAGE,
        Param::optional("api_server", "geetestApiServerSubdomain", Check::Text)
            .aliases(&["apiServer"]),
    ]),
    answer: AnswerShape::Object {
        keys: &[
            "pass_token",
            "captcha_id",
            "lot_number",
            "gen_time",
            "captcha_output",
        ],
        also: &[],
    },
    answer_user_agent: false,
    needs_proxy: false,
    needs_user_agent: false,
    task_version: Some(4),
    identity: Identity::Declared,
    inphp_result: false,
    typical: TYPICAL_TOKEN,
};

/// 2captcha's and anti-captcha's own accounts of the coordinates task: 2captcha's in.php
/// (`coordinatescaptcha=1` on an image, `textinstructions`, `imginstructions`, `min_clicks`,
/// `max_clicks`, `lang`) and `CoordinatesTask`; anti-captcha's `ImageToCoordinatesTask`
/// (`comment`, `mode`).
const ANTI_ONLY: Dialects = Dialects::of(&[Dialect::AntiCaptcha]);
const TWOCAPTCHA_BOTH: Dialects = TWOCAPTCHA.union(TWOCAPTCHA_V2);

pub const COORDINATES: TypeSpec = TypeSpec {
    name: "coordinates",
    methods: &["base64", "post"],
    inphp_flag: Some("coordinatescaptcha"),
    task_names: &[
        TaskName::new("ImageToCoordinatesTask", Either, ANTI_ONLY),
        TaskName::new("CoordinatesTask", Either, TWOCAPTCHA_V2),
    ],
    inphp: TWOCAPTCHA,
    // The same picture and instruction get the same points, as the same image gets its text.
    reuse: Reuse::Reusable,
    lifetime: secs(
        60 * 60,
        "the same image and instruction have the same points: how long the coalescing cache keeps an answer, as for images",
    ),
    first_poll: secs(
        5,
        "2captcha's API docs: a first poll after 5 s for every type but reCAPTCHA",
    ),
    params: Parameters::Declared(&[
        // `file` is `method=post`'s upload.
        Param::required("body", "body", Check::Image).aliases(&["file"]),
        Param::optional("textinstructions", "comment", Check::Text).aliases(&["instructions"]),
        Param::optional("imginstructions", "imgInstructions", Check::Image).only(TWOCAPTCHA_BOTH),
        Param::optional("min_clicks", "minClicks", Check::Count(MAX_COUNT))
            .only(TWOCAPTCHA_BOTH)
            .not_above("max_clicks"),
        Param::optional("max_clicks", "maxClicks", Check::Count(MAX_COUNT)).only(TWOCAPTCHA_BOTH),
        Param::only_in("lang", Check::Text, TWOCAPTCHA),
        // `points` (the default) or `rectangles`, whose answers are corners, not points.
        Param::optional("mode", "mode", Check::OneOf(&["points", "rectangles"])).only(ANTI_ONLY),
        // anti-captcha's, "to distinguish the source of image captchas in spending statistics".
        Param::optional("pageurl", "websiteURL", Check::Page).only(ANTI_ONLY),
    ]),
    answer: AnswerShape::Points {
        field: "coordinates",
    },
    answer_user_agent: false,
    needs_proxy: false,
    needs_user_agent: false,
    task_version: None,
    identity: Identity::Declared,
    inphp_result: false,
    typical: TYPICAL_TOKEN,
};

/// Every type the gateway has no declaration for, forwarded as sent (`model::kind::passthrough`).
/// It names no method or task type of its own: whatever the caller's protocol names and the
/// gateway does not declare is this kind, sent only to accounts of that protocol.
pub const OTHER: TypeSpec = TypeSpec {
    name: "other",
    methods: &[],
    inphp_flag: None,
    task_names: &[],
    inphp: Dialects::INPHP,
    // Nothing is known of its answer: one caller, never kept for another.
    reuse: Reuse::SingleUse { poolable: false },
    lifetime: secs(
        60,
        "unknown type: the cautious figure, half the shortest declared token's",
    ),
    first_poll: secs(
        5,
        "unknown type: between an image's first wait and a token's",
    ),
    params: Parameters::Passthrough,
    answer: AnswerShape::AsGiven,
    answer_user_agent: false,
    needs_proxy: false,
    needs_user_agent: false,
    task_version: None,
    identity: Identity::Declared,
    inphp_result: false,
    typical: TYPICAL_TOKEN,
};
