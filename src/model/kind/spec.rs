//! What a task type declaration holds (see `catalog.rs` for the declarations themselves).

use std::time::Duration;

use super::Reuse;

/// A provider's dialect of one of the two wire protocols: a type's names and whether a
/// provider solves it are stated per dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// CaptchaAI's `in.php`/`res.php` (the simulator speaks it too).
    CaptchaAi,
    /// 2captcha's `in.php`/`res.php`.
    TwoCaptcha,
    /// anti-captcha's `createTask`.
    AntiCaptcha,
    /// CapSolver's `createTask`.
    CapSolver,
    /// 2captcha's v2 `createTask` (anti-captcha's names, with a few of its own).
    TwoCaptchaV2,
}

impl Dialect {
    pub const ALL: [Dialect; 5] = [
        Dialect::CaptchaAi,
        Dialect::TwoCaptcha,
        Dialect::AntiCaptcha,
        Dialect::CapSolver,
        Dialect::TwoCaptchaV2,
    ];

    const fn bit(self) -> u8 {
        1 << self as u8
    }

    /// The provider's name as the docs and messages give it.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::CaptchaAi => "CaptchaAI",
            Dialect::TwoCaptcha => "2captcha",
            Dialect::AntiCaptcha => "anti-captcha",
            Dialect::CapSolver => "CapSolver",
            Dialect::TwoCaptchaV2 => "2captcha v2",
        }
    }
}

/// A set of dialects, written in a declaration as `Dialects::of(&[...])`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dialects(u8);

impl Dialects {
    pub const NONE: Dialects = Dialects(0);
    pub const ALL: Dialects = Dialects::of(&Dialect::ALL);
    /// The two `in.php` dialects.
    pub const INPHP: Dialects = Dialects::of(&[Dialect::CaptchaAi, Dialect::TwoCaptcha]);
    /// anti-captcha and 2captcha v2, which share anti-captcha's names.
    pub const ANTI_NAMES: Dialects = Dialects::of(&[Dialect::AntiCaptcha, Dialect::TwoCaptchaV2]);
    pub const CAPSOLVER: Dialects = Dialects::of(&[Dialect::CapSolver]);

    pub const fn of(dialects: &[Dialect]) -> Dialects {
        let mut bits = 0;
        let mut i = 0;
        while i < dialects.len() {
            bits |= dialects[i].bit();
            i += 1;
        }
        Dialects(bits)
    }

    pub const fn union(self, other: Dialects) -> Dialects {
        Dialects(self.0 | other.0)
    }

    pub const fn intersection(self, other: Dialects) -> Dialects {
        Dialects(self.0 & other.0)
    }

    pub fn contains(self, dialect: Dialect) -> bool {
        self.0 & dialect.bit() != 0
    }

    /// Its dialects' names, in `Dialect::ALL`'s order.
    pub fn names(self) -> Vec<&'static str> {
        Dialect::ALL
            .into_iter()
            .filter(|d| self.contains(*d))
            .map(Dialect::name)
            .collect()
    }
}

/// Whether a task type name carries the caller's proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyName {
    /// `...TaskProxyless`: the provider's own proxy.
    Proxyless,
    /// `...Task`: the caller's proxy, in the task's proxy fields.
    Proxied,
    /// One name either way (`ImageToTextTask`, CapSolver's `AntiTurnstileTaskProxyLess`).
    Either,
}

/// One `createTask` type name of a task type.
#[derive(Debug, Clone, Copy)]
pub struct TaskName {
    /// As the dialect spells it; read back without regard to case.
    pub name: &'static str,
    pub proxy: ProxyName,
    /// The dialects that take this name. `NONE`: a legacy name read from callers, never sent.
    pub dialects: Dialects,
    /// reCAPTCHA's Enterprise variants: `Some(true)` for a name that says it
    /// (`...EnterpriseTask`), `None` for one that serves both (anti-captcha's v3, which marks
    /// Enterprise with `isEnterprise`).
    pub enterprise: Option<bool>,
    /// A field this name carries with a fixed value where another kind shares the name
    /// (anti-captcha's `TurnstileTask` with `cloudflareTaskType: cf_clearance` asks for the
    /// Cloudflare challenge's cookie): sent with the name, and a task that carries it is this
    /// kind.
    pub marker: Option<(&'static str, &'static str)>,
}

impl TaskName {
    pub const fn new(name: &'static str, proxy: ProxyName, dialects: Dialects) -> TaskName {
        TaskName {
            name,
            proxy,
            dialects,
            enterprise: Some(false),
            marker: None,
        }
    }

    pub const fn marked(self, field: &'static str, value: &'static str) -> TaskName {
        TaskName {
            marker: Some((field, value)),
            ..self
        }
    }

    pub const fn enterprise(self) -> TaskName {
        TaskName {
            enterprise: Some(true),
            ..self
        }
    }

    pub const fn with_or_without_enterprise(self) -> TaskName {
        TaskName {
            enterprise: None,
            ..self
        }
    }
}

/// A figure and where it comes from (a vendor's or provider's documentation, or why the
/// cautious guess was taken), so a reader can check it.
#[derive(Debug, Clone, Copy)]
pub struct Sourced<T> {
    pub value: T,
    pub source: &'static str,
}

pub const fn secs(value: u64, source: &'static str) -> Sourced<Duration> {
    Sourced {
        value: Duration::from_secs(value),
        source,
    }
}

/// One task type, declared once: every layer reads its facts from here.
#[derive(Debug, Clone, Copy)]
pub struct TypeSpec {
    /// The native API's and the metrics' name; never changes.
    pub name: &'static str,
    /// The `in.php` `method` values that ask for it. reCAPTCHA v2 and v3 share `userrecaptcha`
    /// (`version=v3` tells them apart); a text question comes as `textcaptcha=` with `method=post`
    /// or none.
    pub methods: &'static [&'static str],
    /// The `in.php` parameter that, when set, makes one of `methods` ask for this kind rather
    /// than the kind that method otherwise is: a flag set to 1 (`coordinatescaptcha` on an
    /// image's `post`/`base64`), or one of the kind's own parameters sent at all (a question's
    /// `textcaptcha` on `post`).
    pub inphp_flag: Option<&'static str>,
    /// Its `createTask` names, each with the dialects that take it.
    pub task_names: &'static [TaskName],
    /// The `in.php` dialects that solve it (the `createTask` ones are those with a name for it).
    pub inphp: Dialects,
    pub reuse: Reuse,
    /// How long an answer lives from the moment the provider reported it ready.
    pub lifetime: Sourced<Duration>,
    /// When the first poll for a task is worth making.
    pub first_poll: Sourced<Duration>,
    pub params: Parameters,
    pub answer: AnswerShape,
    /// Whether the answer is bound to a user agent the provider reports with it.
    pub answer_user_agent: bool,
    /// Whether a task needs the caller's proxy (the answer is bound to its address).
    pub needs_proxy: bool,
    /// Whether a task needs the caller's user agent.
    pub needs_user_agent: bool,
    /// The `version` a `createTask` of this kind carries where its names are another kind's
    /// too (GeeTest v4 shares v3's `GeeTestTask...` at anti-captcha and 2captcha v2, told apart
    /// by `version: 4`); CapSolver tells them apart by the fields instead.
    pub task_version: Option<u8>,
    /// What a target's identity is made of (`model::Target`).
    pub identity: Identity,
    /// Whether `in.php` JSON replies repeat the answer as `result`, where CaptchaAI documents
    /// it and its SDK reads it (docs/PROTOCOL.md item 10).
    pub inphp_result: bool,
    /// How long real providers take and what they charge: the simulator's defaults.
    pub typical: Typical,
}

/// A type's solve at real providers, as the simulator plays it.
#[derive(Debug, Clone, Copy)]
pub struct Typical {
    /// The range a solve takes, in milliseconds.
    pub solve_ms: (u64, u64),
    /// 2captcha's list price per task, in dollars, as `get2` reports a price.
    pub price: &'static str,
    /// Whether a solve answers a verifiable token; `false`: words a person typed (an image's
    /// text, a question's answer).
    pub token: bool,
}

/// Token types without figures of their own: reCAPTCHA v2's.
pub const TYPICAL_TOKEN: Typical = Typical {
    solve_ms: (2_000, 5_000),
    price: "0.00299",
    token: true,
};

/// What a declared kind's target identity is made of. Target ids name pools, answer caches and
/// waiting lines in Redis, so a kind's ids never change when its code does: a kind that
/// moved onto its declaration keeps the parts its ids were first computed from.
#[derive(Debug, Clone, Copy)]
pub enum Identity {
    /// Every parameter set, under its declared name, in declaration order; the page as every
    /// kind keys it.
    Declared,
    /// These parts, in this order, each always present.
    Parts(&'static [IdPart]),
    /// The parts this function gives (`name`, `value`) from the declared values: for a kind
    /// whose first ids were made of values in a form no [`IdPart`] writes (an image's digest and
    /// its hints as one text).
    Computed(IdParts),
}

/// Gives a target's identity parts (`name`, `value`) from a request's declared values.
pub type IdParts = fn(&[(&'static str, String)], &mut dyn FnMut(&str, &str));

/// One part of a target's identity: `part=value`, where the value is a declared parameter's.
#[derive(Debug, Clone, Copy)]
pub struct IdPart {
    pub part: &'static str,
    /// The declared parameter it is read from.
    pub param: &'static str,
    pub form: IdForm,
}

/// How a parameter's value enters an [`IdPart`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdForm {
    /// As sent; empty when absent.
    Text,
    /// The kind's page ([`PAGE`]) as every kind keys it (`model::target::normalized`).
    Page,
    /// Only the host of the kind's page (a Cloudflare clearance is the whole host's).
    Host,
}

impl IdPart {
    pub const fn new(part: &'static str, param: &'static str, form: IdForm) -> IdPart {
        IdPart { part, param, form }
    }
}

impl TypeSpec {
    /// The parameter among its own that selects it on another kind's method (a question's
    /// `textcaptcha`), where its `inphp_flag` is one; `None` for a plain flag.
    pub fn selecting_param(&self) -> Option<&'static Param> {
        let flag = self.inphp_flag?;
        self.declared_params().iter().find(|p| p.name == flag)
    }

    /// Its parameter declarations; empty for a typed kind.
    pub fn declared_params(&self) -> &'static [Param] {
        match self.params {
            Parameters::Declared(params) => params,
            Parameters::Typed | Parameters::Passthrough => &[],
        }
    }

    /// The dialects that solve it: its `in.php` ones and every dialect one of its names is sent to.
    pub fn solved_in(&self) -> Dialects {
        self.task_names
            .iter()
            .fold(self.inphp, |all, n| all.union(n.dialects))
    }
}

/// Where a type's parameters are read and written: by hand for reCAPTCHA, whose parameters have
/// typed fields (`TaskParams`), or from the declaration for every other.
#[derive(Debug, Clone, Copy)]
pub enum Parameters {
    /// `TaskParams` has a variant of its own for the type.
    Typed,
    /// Read and written by name from these declarations (`TaskParams::Declared`).
    Declared(&'static [Param]),
    /// Not read at all: kept as the caller sent them and forwarded so (`TaskParams::Passthrough`).
    Passthrough,
}

/// What a parameter's value must look like before it is passed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Any text.
    Text,
    /// An absolute http(s) URL (refused with `ERROR_PAGEURL`).
    Page,
    /// A site key: letters, digits, `-`, `_`, `.`.
    Key,
    /// A flag: read as `1` or absent.
    Flag,
    /// A JSON object of strings: `name[key]=value` fields in `in.php`, the object's JSON text in
    /// a `createTask` field (FunCaptcha's `data`).
    Object,
    /// An image: base64 text (a data-URI prefix is read), or in `in.php` also an uploaded file
    /// under the parameter's name or an alias. Kept as standard base64, so the same picture
    /// sent either way is the same target; the target's identity holds its digest.
    Image,
    /// A whole number from 0 to this most (2captcha's `minClicks`, an image's `numeric`): text
    /// in `in.php`, a JSON number in `createTask`. `0` is how clients leave one unset ("no
    /// limit", "any characters"), so it reads as absent and two tasks that differ only so are
    /// one target.
    Count(u32),
    /// One of these words (anti-captcha's `mode`: `points` or `rectangles`).
    OneOf(&'static [&'static str]),
}

/// The largest click count: more clicks than any challenge image holds.
pub const MAX_COUNT: u32 = 1000;
/// A reCAPTCHA action, a min score, a Turnstile action, a language, a domain or an API server:
/// short words (`model::limits`).
pub const MAX_WORD_LEN: usize = 256;
/// A text captcha's question or an image's instructions (2captcha takes 140 characters).
pub const MAX_TEXT_LEN: usize = 2048;

/// One parameter of a declared type, under its name in each protocol.
#[derive(Debug, Clone, Copy)]
pub struct Param {
    /// Its name in `in.php` and the native API; the one the target's identity uses.
    pub name: &'static str,
    /// Other `in.php` spellings clients send.
    pub aliases: &'static [&'static str],
    /// Its `createTask` field at anti-captcha (and 2captcha v2 and CapSolver unless they spell
    /// it otherwise); `outer.inner` for a text carried inside an object field (hCaptcha's
    /// `data` is `enterprisePayload.rqdata`); empty for one `createTask` has no field for.
    pub task: &'static str,
    /// Its `createTask` field at 2captcha v2, where it differs (GeeTest v4's
    /// `initParameters.captcha_id`).
    pub twocaptcha_v2: &'static str,
    /// Its `createTask` field at CapSolver, where it differs.
    pub capsolver: &'static str,
    pub required: bool,
    pub check: Check,
    /// The dialects that take it: all, but for a parameter only some providers document (a task
    /// that sets it goes only to their accounts; hCaptcha's `domain` is 2captcha's alone).
    pub only: Dialects,
    /// For a [`Check::Count`] whose larger values only some dialects document: values above
    /// the first are taken only by the second (an image's `numeric` 3 and 4, which
    /// anti-captcha's 0-2 have no word for).
    pub above: Option<(u32, Dialects)>,
    /// Another [`Check::Count`] parameter of the kind this one may not exceed when both are set
    /// (`min_len` and `max_len`).
    pub not_above: Option<&'static str>,
    /// The most bytes its value may hold, where its form's bound (`model::limits`) is too
    /// generous for what it is (an image's instructions, a word).
    pub longest: Option<usize>,
    /// Documented beside the task in the `createTask` request rather than inside it
    /// (anti-captcha's and 2captcha v2's `languagePool`). anti-captcha's own clients put it
    /// inside, so it is read from either place and written to both.
    pub beside_task: bool,
    /// Changes with every page load (hCaptcha's `rqdata`, a challenge page's `chlPageData`):
    /// answers solved ahead of a load could never carry it, so no `[[pools]]` table sets it.
    pub per_load: bool,
    /// A second `in.php` spelling it is also sent under, where providers' docs and their own
    /// clients disagree (CaptchaAI documents `regsense`; its official SDK sends
    /// `caseSensitive`): each reads its own, and ignores the other.
    pub also_sent_as: Option<&'static str>,
}

impl Param {
    pub const fn required(name: &'static str, task: &'static str, check: Check) -> Param {
        Param {
            name,
            aliases: &[],
            task,
            twocaptcha_v2: task,
            capsolver: task,
            required: true,
            check,
            only: Dialects::ALL,
            above: None,
            not_above: None,
            longest: None,
            beside_task: false,
            per_load: false,
            also_sent_as: None,
        }
    }

    pub const fn optional(name: &'static str, task: &'static str, check: Check) -> Param {
        Param {
            required: false,
            ..Param::required(name, task, check)
        }
    }

    /// An optional `in.php` parameter only `dialects` document: a task that sets it goes only to
    /// their accounts.
    pub const fn only_in(name: &'static str, check: Check, dialects: Dialects) -> Param {
        Param {
            only: dialects,
            ..Param::optional(name, "", check)
        }
    }

    /// Whether `createTask` carries it.
    pub fn in_task_api(&self) -> bool {
        !self.task.is_empty()
    }

    /// Taken only by `dialects`: a task that sets it goes only to their accounts.
    pub const fn only(self, dialects: Dialects) -> Param {
        Param {
            only: dialects,
            ..self
        }
    }

    /// Values above `max` are taken only by `dialects`: a task that sends one goes only to
    /// their accounts.
    pub const fn above(self, max: u32, dialects: Dialects) -> Param {
        Param {
            above: Some((max, dialects)),
            ..self
        }
    }

    /// May not exceed the kind's parameter `other` when both are set.
    pub const fn not_above(self, other: &'static str) -> Param {
        Param {
            not_above: Some(other),
            ..self
        }
    }

    /// The dialects that take it with `value`: its own, narrowed for a value above what some
    /// dialects document.
    pub fn taken_by(&self, value: &str) -> Dialects {
        match self.above {
            Some((max, dialects)) if value.parse::<u32>().is_ok_and(|n| n > max) => {
                self.only.intersection(dialects)
            }
            _ => self.only,
        }
    }

    /// Carried beside the task in the `createTask` request, not inside it.
    pub const fn beside_task(self) -> Param {
        Param {
            beside_task: true,
            ..self
        }
    }

    /// Also sent to `in.php` under `name`.
    pub const fn also_sent_as(self, name: &'static str) -> Param {
        Param {
            also_sent_as: Some(name),
            ..self
        }
    }

    /// Changes with every page load: never set in a pool.
    pub const fn per_load(self) -> Param {
        Param {
            per_load: true,
            ..self
        }
    }

    /// Holds at most `bytes`.
    pub const fn longest(self, bytes: usize) -> Param {
        Param {
            longest: Some(bytes),
            ..self
        }
    }

    pub const fn aliases(self, aliases: &'static [&'static str]) -> Param {
        Param { aliases, ..self }
    }

    pub const fn capsolver(self, capsolver: &'static str) -> Param {
        Param { capsolver, ..self }
    }

    pub const fn twocaptcha_v2(self, twocaptcha_v2: &'static str) -> Param {
        Param {
            twocaptcha_v2,
            ..self
        }
    }

    /// Its `createTask` field in a dialect.
    pub fn task_field(&self, dialect: Dialect) -> &'static str {
        match dialect {
            Dialect::CapSolver => self.capsolver,
            Dialect::TwoCaptchaV2 => self.twocaptcha_v2,
            _ => self.task,
        }
    }

    /// Every `createTask` field it is read from: each dialect's spelling once, anti-captcha's
    /// first.
    pub fn task_fields(&self) -> impl Iterator<Item = &'static str> + '_ {
        let all = [self.task, self.twocaptcha_v2, self.capsolver];
        all.into_iter()
            .enumerate()
            .filter(move |(i, f)| !f.is_empty() && !all[..*i].contains(f))
            .map(|(_, f)| f)
    }

    /// A `createTask` field as the task's own field and, for one carried inside an object
    /// field, its key there.
    pub fn split_field(field: &'static str) -> (&'static str, Option<&'static str>) {
        match field.split_once('.') {
            Some((outer, inner)) => (outer, Some(inner)),
            None => (field, None),
        }
    }
}

/// The page a token is for: `pageurl` in `in.php`, `websiteURL` in `createTask`.
pub const PAGE: Param = Param::required("pageurl", "websiteURL", Check::Page);
/// The widget's site key: `sitekey`, `websiteKey`.
pub const SITEKEY: Param = Param::required("sitekey", "websiteKey", Check::Key);

/// The shape of an answer, which each protocol writes its own way.
#[derive(Debug, Clone, Copy)]
pub enum AnswerShape {
    /// One string: `in.php` returns it as `request`; a `createTask` solution carries it under
    /// each of `fields` (written to all, so every client finds its own; read from the first
    /// present; one inside an object field, `outer.inner`, is read only). `extras` are keys a provider may give beside it (hCaptcha's `respKey`): kept
    /// with the token (stored as `{"token": .., key: ..}` when one was given, else the token
    /// alone) and written beside it wherever a protocol has room: a `createTask` solution,
    /// `in.php`'s JSON mode, the native API's `extras`.
    Token {
        fields: &'static [&'static str],
        extras: &'static [&'static str],
    },
    /// A JSON object with these keys: `in.php` returns it as `request` (its JSON text in a
    /// plain-text reply); a `createTask` solution is the object itself. `also` names a key
    /// some providers spell another way, as `(their spelling, key)`: written beside the key in
    /// every answer, so every client finds its own, and read in its place.
    Object {
        keys: &'static [&'static str],
        also: &'static [(&'static str, &'static str)],
    },
    /// Points on an image, stored as a JSON array of `[x, y]` pairs (or anti-captcha's
    /// rectangles, `[x1, y1, x2, y2]`) in pixels from the top left. Each protocol writes them
    /// its own way: `in.php` as `coordinates:x=..,y=..;...` (a JSON array of `{"x", "y"}` in
    /// JSON mode); a `createTask` solution under `field`, as anti-captcha's `[[x, y]]` or
    /// 2captcha's `[{"x", "y"}]`.
    Points { field: &'static str },
    /// Whatever the provider gave, kept whole: text stays text, and a `createTask` solution or
    /// an `in.php` object stays that object (a pass-through type's answer).
    AsGiven,
}

impl AnswerShape {
    /// A stored answer's token and the extras kept beside it (hCaptcha's `respKey`), for the
    /// writers; any other shape's stored text is its own token, with none.
    pub fn token_parts<'a>(
        &self,
        stored: &'a str,
    ) -> (std::borrow::Cow<'a, str>, Vec<(&'static str, String)>) {
        use std::borrow::Cow;
        let AnswerShape::Token { extras, .. } = self else {
            return (Cow::Borrowed(stored), Vec::new());
        };
        // A token never starts with `{`: only a stored object is parsed.
        if extras.is_empty() || !stored.starts_with('{') {
            return (Cow::Borrowed(stored), Vec::new());
        }
        let Ok(serde_json::Value::Object(map)) = serde_json::from_str(stored) else {
            return (Cow::Borrowed(stored), Vec::new());
        };
        let Some(token) = map.get("token").and_then(serde_json::Value::as_str) else {
            return (Cow::Borrowed(stored), Vec::new());
        };
        let kept = extras
            .iter()
            .filter_map(|k| Some((*k, map.get(*k)?.as_str()?.to_owned())))
            .collect();
        (Cow::Owned(token.to_owned()), kept)
    }

    /// A solution's string under `field`, or under `outer.inner` inside an object field
    /// (CapSolver's `cookies.cf_clearance`).
    pub fn field<'a>(solution: &'a serde_json::Value, field: &str) -> Option<&'a str> {
        let value = match field.split_once('.') {
            Some((outer, inner)) => solution.get(outer)?.get(inner)?,
            None => solution.get(field)?,
        };
        value.as_str()
    }

    /// Every key a declared kind may carry beside its token: a provider reply holding one is
    /// kept whole for the kind's declaration to read ([`AnswerShape::canonical`]).
    pub fn any_extra(has: impl Fn(&str) -> bool) -> bool {
        super::Kind::ALL
            .into_iter()
            .any(|kind| match kind.spec().answer {
                AnswerShape::Token { extras, .. } => extras.iter().any(|k| has(k)),
                _ => false,
            })
    }

    /// Whether the answer is JSON (an object, or a list of points) rather than one string.
    pub fn is_object(&self) -> bool {
        matches!(
            self,
            AnswerShape::Object { .. } | AnswerShape::AsGiven | AnswerShape::Points { .. }
        )
    }

    /// An answer as a provider gave it (a token, or a `createTask` solution object this gateway
    /// could not tell apart without the kind) in the form the engine stores for this shape:
    /// the token, or the object with this shape's keys.
    pub fn canonical(&self, text: String) -> String {
        if let AnswerShape::Points { field } = self {
            return super::points::read(&text, field).map_or(text, |points| points.to_string());
        }
        let Ok(value @ serde_json::Value::Object(_)) = serde_json::from_str(&text) else {
            return text;
        };
        let serde_json::Value::Object(map) = &value else {
            return text;
        };
        match self {
            AnswerShape::AsGiven | AnswerShape::Points { .. } => text,
            AnswerShape::Token { fields, extras } => {
                let Some(token) = fields
                    .iter()
                    .chain(&["token"])
                    .find_map(|f| AnswerShape::field(&value, f))
                else {
                    return text;
                };
                let kept: serde_json::Map<String, serde_json::Value> = extras
                    .iter()
                    .filter_map(|k| Some(((*k).to_owned(), map.get(*k)?.as_str()?.into())))
                    .collect();
                if kept.is_empty() {
                    return token.to_owned();
                }
                let mut stored = serde_json::Map::from_iter([("token".to_owned(), token.into())]);
                stored.extend(kept);
                serde_json::Value::Object(stored).to_string()
            }
            AnswerShape::Object { keys, also } => {
                let read = |k: &str| {
                    map.get(k).or_else(|| {
                        also.iter()
                            .find(|(_, key)| *key == k)
                            .and_then(|(spelling, _)| map.get(*spelling))
                    })
                };
                let mut kept: serde_json::Map<_, _> = keys
                    .iter()
                    .filter_map(|k| read(k).map(|v| ((*k).to_owned(), v.clone())))
                    .collect();
                if kept.is_empty() {
                    return text;
                }
                for (spelling, key) in *also {
                    if let Some(v) = kept.get(*key).cloned() {
                        kept.insert((*spelling).to_owned(), v);
                    }
                }
                serde_json::Value::Object(kept).to_string()
            }
        }
    }
}
