// The one translation unit that compiles Asio's and Beast's implementation (separate compilation:
// BOOST_ASIO_SEPARATE_COMPILATION and BOOST_BEAST_SEPARATE_COMPILATION are set for every user of
// purser_http), so the rest of the tree only parses declarations.
#include <utility>

#include <boost/asio/impl/src.hpp>
#include <boost/asio/ssl/impl/src.hpp>
#include <boost/beast/src.hpp>
