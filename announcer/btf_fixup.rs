//! Rewrites type and member names in an object's `.BTF` section that the kernel rejects.
//!
//! rustc 1.96 + bpf-linker 0.10 emit `UNION 'MaybeUninit<u8>'` for aya-log's `Global<u8>`
//! (the `AYA_LOG_LEVEL` symbol): bpf-linker sanitizes struct names but not union names, and
//! `BPF_BTF_LOAD` fails with "Invalid name", taking every BTF-defined map down with it. Each
//! offending byte (anything but `[A-Za-z0-9_.]`) of a *type or member name* is replaced by `_`
//! in place, so no string offset moves. Line-info strings that share the table are left alone.

/// Sanitizes the `.BTF` section of the ELF object `obj` in place; returns how many names
/// changed.
pub fn sanitize(obj: &mut [u8]) -> Result<usize, String> {
    use object::{Object, ObjectSection};
    let (off, size) = {
        let file = object::File::parse(&*obj).map_err(|e| e.to_string())?;
        let Some(sec) = file.section_by_name(".BTF") else {
            return Ok(0);
        };
        sec.file_range()
            .ok_or("the .BTF section has no file data")?
    };
    let btf = &mut obj[off as usize..(off + size) as usize];
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let hdr_len = u32_at(btf, 4) as usize;
    let (type_off, type_len) = (u32_at(btf, 8) as usize, u32_at(btf, 12) as usize);
    let str_off = u32_at(btf, 16) as usize;
    let types = hdr_len + type_off..hdr_len + type_off + type_len;
    let strs = hdr_len + str_off;

    let mut names = Vec::new();
    let mut p = types.start;
    while p < types.end {
        let name_off = u32_at(btf, p);
        let info = u32_at(btf, p + 4);
        let vlen = (info & 0xffff) as usize;
        let kind = (info >> 24) & 0x1f;
        names.push(name_off);
        p += 12;
        let (members, each) = match kind {
            1 | 14 | 17 => (0, 4), // INT, VAR, DECL_TAG: one u32
            3 => (0, 12),          // ARRAY
            4 | 5 => (vlen, 12),   // STRUCT, UNION: named members
            6 => (vlen, 8),        // ENUM: named values
            19 => (vlen, 12),      // ENUM64
            13 => (vlen, 8),       // FUNC_PROTO: named params
            15 => (0, 12 * vlen),  // DATASEC: no names
            _ => (0, 0),
        };
        if members > 0 {
            for m in 0..members {
                names.push(u32_at(btf, p + m * each));
            }
            p += members * each;
        } else {
            p += each;
        }
    }
    let mut changed = 0;
    for n in names {
        let start = strs + n as usize;
        let mut dirty = false;
        let mut i = start;
        while i < btf.len() && btf[i] != 0 {
            let c = btf[i];
            if !(c.is_ascii_alphanumeric() || c == b'_' || c == b'.') {
                btf[i] = b'_';
                dirty = true;
            }
            i += 1;
        }
        changed += usize::from(dirty);
    }
    Ok(changed)
}
