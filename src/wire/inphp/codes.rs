//! Error and status codes of the compatible API, spelled exactly as clients match them.

pub const NOT_READY: &str = "CAPCHA_NOT_READY";
pub const REPORT_RECORDED: &str = "OK_REPORT_RECORDED";

pub const WRONG_USER_KEY: &str = "ERROR_WRONG_USER_KEY";
pub const KEY_DOES_NOT_EXIST: &str = "ERROR_KEY_DOES_NOT_EXIST";
pub const ZERO_BALANCE: &str = "ERROR_ZERO_BALANCE";
pub const NO_SLOT_AVAILABLE: &str = "ERROR_NO_SLOT_AVAILABLE";
pub const PAGEURL: &str = "ERROR_PAGEURL";
pub const GOOGLEKEY: &str = "ERROR_GOOGLEKEY";
pub const BAD_PARAMETERS: &str = "ERROR_BAD_PARAMETERS";
pub const BAD_PROXY: &str = "ERROR_BAD_PROXY";
pub const ZERO_CAPTCHA_FILESIZE: &str = "ERROR_ZERO_CAPTCHA_FILESIZE";
pub const TOO_BIG_CAPTCHA_FILESIZE: &str = "ERROR_TOO_BIG_CAPTCHA_FILESIZE";
pub const IMAGE_TYPE_NOT_SUPPORTED: &str = "ERROR_IMAGE_TYPE_NOT_SUPPORTED";
pub const UPLOAD: &str = "ERROR_UPLOAD";
pub const CAPTCHA_UNSOLVABLE: &str = "ERROR_CAPTCHA_UNSOLVABLE";
pub const WRONG_ID_FORMAT: &str = "ERROR_WRONG_ID_FORMAT";
pub const WRONG_CAPTCHA_ID: &str = "ERROR_WRONG_CAPTCHA_ID";
pub const EMPTY_ACTION: &str = "ERROR_EMPTY_ACTION";
pub const SERVER_ERROR: &str = "ERROR_SERVER_ERROR";
pub const DUPLICATE_REPORT: &str = "ERROR_DUPLICATE_REPORT";
