// A small syntax highlighter for generated code: C-like sources, LLVM IR, and tinyplug's UOp listings.
// Returns HTML with <span class="hl-..."> around comments, strings, numbers, keywords, types and names.
"use strict";
const HL = (() => {
  // text from a trace is data: escaped for both element text and quoted attribute values
  const ESC = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;", "`": "&#96;"};
  const esc = s => String(s ?? "").replace(/[&<>"'`]/g, ch => ESC[ch]);
  const C_KW = new Set(("if else for while do return break continue switch case default struct union typedef static const " +
    "extern inline restrict volatile goto sizeof __global __local __kernel kernel global local __device__ __global__ " +
    "__shared__ __restrict__ device threadgroup constant using namespace template").split(" "));
  const TYPES = new Set(("void bool char short int long float double half unsigned signed size_t uchar ushort uint ulong " +
    "float2 float3 float4 float8 half2 half4 half8 int2 int4 bfloat16 __bf16 i1 i8 i16 i32 i64 ptr").split(" "));
  const LLVM_KW = new Set(("define declare ret br label load store getelementptr inbounds alloca call phi icmp fcmp add fadd " +
    "sub fsub mul fmul udiv sdiv fdiv urem srem frem and or xor shl lshr ashr select zext sext trunc fptrunc fpext " +
    "fptosi fptoui sitofp uitofp bitcast to align nsw nuw fast noalias nocapture readonly writeonly dso_local " +
    "local_unnamed_addr addrspace target datalayout triple attributes").split(" "));
  const UOP_OPS = /^[A-Z][A-Z0-9_]+$/;
  const TOKEN = /(\/\/[^\n]*|\/\*[\s\S]*?\*\/|;[^\n]*|#[^\n]*)|("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')|(\b0x[0-9a-fA-F]+\b|\b\d+(?:\.\d*)?(?:e[+-]?\d+)?[fFuUlL]*\b)|([%@]?[A-Za-z_][\w.]*)/g;

  function highlight(src, lang) {
    let out = "", last = 0;
    TOKEN.lastIndex = 0;
    for (let m; (m = TOKEN.exec(src)); ) {
      out += esc(src.slice(last, m.index));
      last = TOKEN.lastIndex;
      const [text, comment, str, num, word] = m;
      if (comment !== undefined) {
        // ';' starts a comment only in LLVM IR; '#' is a preprocessor line in C and a header in UOp listings
        if (comment[0] === ";" && lang !== "llvm") { out += esc(";"); TOKEN.lastIndex = m.index + 1; last = m.index + 1; continue; }
        out += `<span class="hl-com">${esc(comment)}</span>`;
      } else if (str !== undefined) out += `<span class="hl-str">${esc(str)}</span>`;
      else if (num !== undefined) out += `<span class="hl-num">${esc(num)}</span>`;
      else {
        let cls = null;
        if (word[0] === "%" || word[0] === "@") cls = "hl-var";
        else if (TYPES.has(word) || word.startsWith("dtypes.")) cls = "hl-ty";
        else if ((lang === "llvm" ? LLVM_KW : C_KW).has(word)) cls = "hl-kw";
        else if (lang === "uops" && UOP_OPS.test(word)) cls = "hl-kw";
        else if (src[TOKEN.lastIndex] === "(") cls = "hl-fn";
        out += cls ? `<span class="${cls}">${esc(word)}</span>` : esc(word);
      }
    }
    return out + esc(src.slice(last));
  }
  return {highlight, escape: esc};
})();
