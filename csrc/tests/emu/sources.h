// Where an emulated case's kernels read source rows: the Source of kernels/api.h named as the
// ops name their fetch policies, and the PEs' tables (the emulated NVSHMEM world).
#pragma once
#include <vector>

#include "../../kernels/api.h"
#include "case_io.h"

namespace mgg::emu {

struct CaseSources {
  kernels::Source source;
  kernels::Sources src;
};

// `source`: table (local table and one remote table, `table` and `remote_table`), direct (peer
// pointers to `peer0`..), get-thread, get-warp, get-block (gets from the PEs' heaps `peer0`..,
// each of `heap_bytes`, completed as `completion` says: loadstore or proxy). `local` names the
// local table for the table source (the terms table in attention's source pass); with
// `table_offset`, both tables of the table source start that many bytes into their arrays.
CaseSources case_sources(Case& c, const char* local = "table", const char* remote = "remote_table");

kernels::Storage storage_of(const Case& c);

}  // namespace mgg::emu
