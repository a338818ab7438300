//! The builtins' ids: [`Builtin`], one per builtin function, namespace or prototype the
//! runtime has, with its JavaScript name and its value. What each does is in the modules that
//! call them (`builtins.rs` and the modules it dispatches to); this file only names them.

use std::collections::HashMap;
use std::sync::OnceLock;

use super::value::{Value, TAG_BUILTIN};

macro_rules! builtins {
    ($($variant:ident = $name:literal,)*) => {
        /// A builtin function or namespace.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Builtin { $($variant,)* }

        const ALL: &[Builtin] = &[$(Builtin::$variant,)*];
        const NAMES: &[&str] = &[$($name,)*];
    };
}

builtins! {
    Math = "Math",
    Json = "JSON",
    Object = "Object",
    Array = "Array",
    String = "String",
    Number = "Number",
    Boolean = "Boolean",
    Console = "console",
    Symbol = "Symbol",
    SymbolIterator = "Symbol.iterator",
    Values = "Array.prototype.values",
    IteratorNext = "%ArrayIteratorPrototype%.next",
    ParseInt = "parseInt",
    ParseFloat = "parseFloat",
    IsNaN = "isNaN",
    MathFloor = "Math.floor",
    MathCeil = "Math.ceil",
    MathRound = "Math.round",
    MathTrunc = "Math.trunc",
    MathAbs = "Math.abs",
    MathMin = "Math.min",
    MathMax = "Math.max",
    MathSqrt = "Math.sqrt",
    MathPow = "Math.pow",
    JsonParse = "JSON.parse",
    JsonStringify = "JSON.stringify",
    ObjectKeys = "Object.keys",
    ObjectValues = "Object.values",
    ObjectEntries = "Object.entries",
    ObjectAssign = "Object.assign",
    ObjectCreate = "Object.create",
    ArrayIsArray = "Array.isArray",
    ArrayFrom = "Array.from",
    NumberIsInteger = "Number.isInteger",
    NumberIsFinite = "Number.isFinite",
    NumberIsNaN = "Number.isNaN",
    NumberParseInt = "Number.parseInt",
    NumberParseFloat = "Number.parseFloat",
    StringFromCharCode = "String.fromCharCode",
    ConsoleLog = "console.log",
    ConsoleInfo = "console.info",
    ConsoleWarn = "console.warn",
    ConsoleError = "console.error",
    Date = "Date",
    DateNow = "Date.now",
    DatePrototype = "Date.prototype",
    DateGetTime = "Date.prototype.getTime",
    DateValueOf = "Date.prototype.valueOf",
    DateToIsoString = "Date.prototype.toISOString",
    DateToJson = "Date.prototype.toJSON",
    MathRandom = "Math.random",
    Require = "require",
    S3Module = "@aws-sdk/client-s3",
    S3Client = "@aws-sdk/client-s3.S3Client",
    S3GetObjectCommand = "@aws-sdk/client-s3.GetObjectCommand",
    S3HeadObjectCommand = "@aws-sdk/client-s3.HeadObjectCommand",
    S3PutObjectCommand = "@aws-sdk/client-s3.PutObjectCommand",
    S3DeleteObjectCommand = "@aws-sdk/client-s3.DeleteObjectCommand",
    S3ListObjectsV2Command = "@aws-sdk/client-s3.ListObjectsV2Command",
    S3ClientPrototype = "S3Client.prototype",
    S3Send = "S3Client.prototype.send",
    S3CommandPrototype = "S3Command.prototype",
    S3BodyPrototype = "S3Body.prototype",
    S3TransformToString = "S3Body.prototype.transformToString",
    S3OutputPrototype = "S3Output.prototype",
    ContextPrototype = "Context.prototype",
    SessionPrototype = "Session.prototype",
    SessionGet = "Session.prototype.get",
    SessionPut = "Session.prototype.put",
    SessionDelete = "Session.prototype.delete",
    SessionKeys = "Session.prototype.keys",
    SessionTransact = "Session.prototype.transact",
    TxnPrototype = "Transaction.prototype",
    TxnGet = "Transaction.prototype.get",
    TxnPut = "Transaction.prototype.put",
    TxnDelete = "Transaction.prototype.delete",
    TxnKeys = "Transaction.prototype.keys",
    ContextRemainingTime = "Context.prototype.getRemainingTimeInMillis",
    StrIndexOf = "String.prototype.indexOf",
    StrLastIndexOf = "String.prototype.lastIndexOf",
    StrIncludes = "String.prototype.includes",
    StrStartsWith = "String.prototype.startsWith",
    StrEndsWith = "String.prototype.endsWith",
    StrSlice = "String.prototype.slice",
    StrSubstring = "String.prototype.substring",
    StrSplit = "String.prototype.split",
    StrToLowerCase = "String.prototype.toLowerCase",
    StrToUpperCase = "String.prototype.toUpperCase",
    StrTrim = "String.prototype.trim",
    StrCharAt = "String.prototype.charAt",
    StrCharCodeAt = "String.prototype.charCodeAt",
    StrToString = "String.prototype.toString",
    ArrPush = "Array.prototype.push",
    ArrPop = "Array.prototype.pop",
    ArrShift = "Array.prototype.shift",
    ArrUnshift = "Array.prototype.unshift",
    ArrJoin = "Array.prototype.join",
    ArrIndexOf = "Array.prototype.indexOf",
    ArrIncludes = "Array.prototype.includes",
    ArrSlice = "Array.prototype.slice",
    ArrConcat = "Array.prototype.concat",
    ArrReverse = "Array.prototype.reverse",
    ArrMap = "Array.prototype.map",
    ArrFilter = "Array.prototype.filter",
    ArrForEach = "Array.prototype.forEach",
    ArrEvery = "Array.prototype.every",
    ArrSome = "Array.prototype.some",
    ArrFind = "Array.prototype.find",
    ObjHasOwnProperty = "Object.prototype.hasOwnProperty",
    NumToString = "Number.prototype.toString",
    Error = "Error",
    TypeError = "TypeError",
    RangeError = "RangeError",
    SyntaxError = "SyntaxError",
    ReferenceError = "ReferenceError",
    EvalError = "EvalError",
    UriError = "URIError",
    ErrorPrototype = "Error.prototype",
    TypeErrorPrototype = "TypeError.prototype",
    RangeErrorPrototype = "RangeError.prototype",
    SyntaxErrorPrototype = "SyntaxError.prototype",
    ReferenceErrorPrototype = "ReferenceError.prototype",
    EvalErrorPrototype = "EvalError.prototype",
    UriErrorPrototype = "URIError.prototype",
    ObjectSetPrototypeOf = "Object.setPrototypeOf",
    ObjectGetPrototypeOf = "Object.getPrototypeOf",
    Function = "Function",
    FunctionPrototype = "Function.prototype",
    FnToString = "Function.prototype.toString",
    FnCall = "Function.prototype.call",
    RegExpPrototype = "RegExp.prototype",
    RegExpTest = "RegExp.prototype.test",
    Buffer = "Buffer",
    BufferFrom = "Buffer.from",
    BufferByteLength = "Buffer.byteLength",
    BufferConcat = "Buffer.concat",
    BufferIsBuffer = "Buffer.isBuffer",
    BufferPrototype = "Buffer.prototype",
    BufferToString = "Buffer.prototype.toString",
    // A regular expression literal's object (its text, `/…/flags`); no global names it.
    RegExpLiteral = "%RegExpLiteral%",
}

impl Builtin {
    pub fn name(self) -> &'static str {
        NAMES[self as usize]
    }

    pub fn named(name: &str) -> Option<Builtin> {
        NAMES.iter().position(|n| *n == name).map(|i| ALL[i])
    }

    /// The builtin `owner.member` (`Array.prototype` and `push`), without making the name:
    /// a method is looked up at every call of it.
    pub fn member(owner: &str, member: &str) -> Option<Builtin> {
        static MEMBERS: OnceLock<HashMap<&str, HashMap<&str, Builtin>>> = OnceLock::new();
        let members = MEMBERS.get_or_init(|| {
            let mut members: HashMap<&str, HashMap<&str, Builtin>> = HashMap::new();
            for (name, builtin) in NAMES.iter().zip(ALL) {
                if let Some((owner, member)) = name.rsplit_once('.') {
                    members.entry(owner).or_default().insert(member, *builtin);
                }
            }
            members
        });
        members.get(owner)?.get(member).copied()
    }

    pub fn value(self) -> Value {
        Value(TAG_BUILTIN | self as u64)
    }

    /// A class whose objects are records: their fields are read from their slot (an S3
    /// command's output, the handler's context), and enumerating them misses, as their
    /// fields are not all the ones Node's objects have, in its order.
    pub fn is_record(self) -> bool {
        matches!(self, Builtin::S3OutputPrototype | Builtin::ContextPrototype)
    }

    /// Whether the builtin is a function (a namespace such as `Math`, or a class's
    /// prototype, is not).
    pub fn is_function(self) -> bool {
        let name = self.name();
        !(matches!(
            self,
            Builtin::Math | Builtin::Json | Builtin::Console | Builtin::S3Module
        ) || name.ends_with(".prototype")
            || name.starts_with('%'))
    }

    pub fn from_value(v: Value) -> Option<Builtin> {
        if v.tag() != TAG_BUILTIN {
            return None;
        }
        ALL.get(v.address() as usize).copied()
    }

    /// Whether some builtin method or namespace member has this name (`push`, `from`): a
    /// call of a method by any other name is not a builtin the runtime has.
    pub fn is_member_name(member: &str) -> bool {
        NAMES
            .iter()
            .any(|n| n.rsplit_once('.').is_some_and(|(_, last)| last == member))
    }
}
