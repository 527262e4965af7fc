#pragma once
// The rendezvous key-value Store (as gloo/rendezvous/store.h): ranks publish their data-plane
// addresses and meet. The interface is the public cumulus::Store (<cumulus/store.h>); Cumulus's
// own implementations are MemoryStore (tests, one process) and the gRPC StoreClient (talking to a
// StoreServer hosted by the launcher).
//
// All methods are thread-safe. Every blocking call takes a timeout; on expiry it throws
// CommError(kTimeout) naming the keys still missing. Unreachable servers throw CommError(kStore)
// naming the endpoint and how long it was tried; a wrong token throws CommError(kUnauthorized).

#include <string>

#include "cumulus/store.h"

namespace cumulus::comm {

using Bytes = std::string;  // values are opaque bytes
// The public interface (<cumulus/store.h>), under the name the layers below the API use.
using Store = cumulus::Store;

}  // namespace cumulus::comm
